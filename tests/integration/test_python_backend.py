"""backend "python": model.py files written against Triton's documented python_backend API
(TritonPythonModel, triton_python_backend_utils) served by the real `cinfer serve` binary
to tritonclient.http. Each instance is a stub process; a model that raises, exits,
segfaults or hangs fails only its own requests, restarts, and leaves other models alone.
The model files are written here from the documented API (none is copied from Triton)."""
import concurrent.futures
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo

# The stub runs on this interpreter (it has numpy); the server reads CINFER_PYTHON.
os.environ["CINFER_PYTHON"] = sys.executable

ADD_SUB_CONFIG = """
name: "{name}"
backend: "python"
{extra}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
"""

ADD_SUB_PY = """
import json
import os
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        cfg = json.loads(args["model_config"])
        self.out0 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(cfg, "OUTPUT0")["data_type"])
        pb_utils.Logger.log_info("add_sub initialized as " + args["model_instance_name"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            o0 = pb_utils.Tensor("OUTPUT0", (a + b).astype(self.out0))
            o1 = pb_utils.Tensor("OUTPUT1", (a - b).astype(self.out0))
            responses.append(pb_utils.InferenceResponse(output_tensors=[o0, o1]))
        return responses

    def finalize(self):
        pass
"""

# One model for the failure modes: INPUT0[0] selects what execute() does.
FAULTY_PY = """
import os
import signal
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            mode = int(x.reshape(-1)[0])
            if mode == 1:
                raise ValueError("the model refuses mode 1")
            if mode == 2:
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == 3:
                os._exit(3)
            if mode == 4:
                while True:
                    time.sleep(1000)
            if mode == 5:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("bad value 5", pb_utils.TritonError.INVALID_ARG)))
                continue
            if mode == 6:
                return []
            if mode == 7:
                responses.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", x.astype(np.float64))]))
                continue
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", x * 2), pb_utils.Tensor("PID", pid)]))
        return responses
"""

FAULTY_CONFIG = """
name: "faulty"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
parameters { key: "execute_timeout_ms" value: { string_value: "1000" } }
"""

# Hangs on INPUT0 == 1 and has no execute_timeout_ms: only the clients leaving ends it.
HANG_PY = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()[0] == 1:
                while True:
                    time.sleep(1000)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
"""

HANG_CONFIG = """
name: "hang"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Echoes what the request says about itself, and BYTES in both directions.
INTROSPECT_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)

    def execute(self, requests):
        out = []
        for r in requests:
            t = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()
            rev = np.array([bytes(reversed(s)) for s in t.reshape(-1)],
                           dtype=np.object_).reshape(t.shape)
            info = {"id": r.request_id(), "params": json.loads(r.parameters()),
                    "requested": r.requested_output_names(),
                    "cancelled": r.is_cancelled(),
                    "args": {k: v for k, v in self.args.items() if k != "model_config"},
                    "config_name": json.loads(self.args["model_config"])["name"],
                    "dtype_in": str(t.dtype)}
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("REVERSED", rev),
                pb_utils.Tensor("INFO", np.array([json.dumps(info).encode()], dtype=np.object_))]))
        return out
"""

INTROSPECT_CONFIG = """
name: "introspect"
backend: "python"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "REVERSED" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Batching: every request learns how many requests its execute() got. A request with
# INPUT0[0][0] == -1 holds the instance until the test creates <model dir>/release, so
# that the next requests queue up and are batched.
BATCH_PY = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.dir = args["model_repository"]

    def execute(self, requests):
        n = len(requests)
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if x[0, 0] == -1:
                open(os.path.join(self.dir, "started"), "w").close()
                deadline = time.monotonic() + 60
                while not os.path.exists(os.path.join(self.dir, "release")):
                    if time.monotonic() > deadline:
                        raise pb_utils.TritonModelException("never released")
                    time.sleep(0.01)
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", x + 1),
                pb_utils.Tensor("NREQ", np.full((x.shape[0], 1), n, dtype=np.int32))]))
        return out
"""

BATCH_CONFIG = """
name: "batched"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "NREQ" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { }
"""

# auto_complete_config fills what the config leaves out (only name and backend are given).
AUTO_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        cfg = auto_complete_model_config.as_dict()
        have = [i["name"] for i in cfg.get("input", [])]
        if "IN" not in have:
            auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_INT64", "dims": [2]})
        auto_complete_model_config.add_output({"name": "OUT", "data_type": "TYPE_INT64", "dims": [2]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 10)]) for r in requests]
"""

# Decoupled: IN = [n] -> n responses OUT = [i], then the FINAL flag alone (Triton's "repeat").
REPEAT_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            sender = r.get_response_sender()
            def work(sender=sender, x=x):  # reads the input after execute() returned
                for i in range(int(x[0])):
                    sender.send(pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUT", np.array([i * i], dtype=np.int32))]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            t = threading.Thread(target=work)
            t.start()
            self.threads.append(t)
        return None

    def finalize(self):
        for t in self.threads:
            t.join()
"""

REPEAT_CONFIG = """
name: "repeat"
backend: "python"
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# BLS: calls other models of the server (python add_sub, the ONNX model, the built-in
# identity backend, the decoupled repeat model as a stream) and reports what came back.
BLS_PY = """
import asyncio
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    async def _async_add_sub(self, a, b):
        req = pb_utils.InferenceRequest(model_name="add_sub",
            inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
            requested_output_names=["OUTPUT0"])
        return await req.async_exec()

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            which = pb_utils.get_input_tensor_by_name(r, "WHICH").as_numpy()[0].decode()
            if which == "add_sub":
                resp = pb_utils.InferenceRequest(model_name="add_sub",
                    inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)],
                    requested_output_names=["OUTPUT0", "OUTPUT1"]).exec()
                if resp.has_error():
                    raise pb_utils.TritonModelException(resp.error().message())
                y = pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy()
            elif which == "async_add_sub":
                resp = asyncio.run(self._async_add_sub(x, x))
                y = pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy()
            elif which == "onnx":
                resp = pb_utils.InferenceRequest(model_name="double_onnx",
                    inputs=[pb_utils.Tensor("X", x.reshape(1, 4))],
                    requested_output_names=["Y"]).exec()
                if resp.has_error():
                    raise pb_utils.TritonModelException(resp.error().message())
                y = pb_utils.get_output_tensor_by_name(resp, "Y").as_numpy().reshape(4)
            elif which == "identity":
                resp = pb_utils.InferenceRequest(model_name="identity_fp32",
                    inputs=[pb_utils.Tensor("INPUT0", x.reshape(1, 4))],
                    requested_output_names=["OUTPUT0"]).exec()
                y = pb_utils.get_output_tensor_by_name(resp, "OUTPUT0").as_numpy().reshape(4)
            elif which == "repeat":
                got = []
                for resp in pb_utils.InferenceRequest(model_name="repeat",
                        inputs=[pb_utils.Tensor("IN", np.array([4], dtype=np.int32))],
                        requested_output_names=["OUT"]).exec(decoupled=True):
                    if resp.has_error():
                        raise pb_utils.TritonModelException(resp.error().message())
                    got.append(int(pb_utils.get_output_tensor_by_name(resp, "OUT").as_numpy()[0]))
                y = np.array(got, dtype=np.float32)
            elif which == "missing":
                resp = pb_utils.InferenceRequest(model_name="no_such_model",
                    inputs=[pb_utils.Tensor("X", x)], requested_output_names=["Y"]).exec()
                raise pb_utils.TritonModelException("BLS said: " + resp.error().message())
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y.astype(np.float32))]))
        return out
"""

BLS_CONFIG = """
name: "bls"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "WHICH" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


def write_model(repo, name, config, model_py):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(textwrap.dedent(config))
    with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
        f.write(textwrap.dedent(model_py))


def write_double_onnx(repo):
    """double_onnx: Y = X + X, FP32 [-1, 4] (built with the onnx package)."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Add", ["X", "X"], ["Y"])], "double",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    os.makedirs(os.path.join(repo, "double_onnx", "1"))
    onnx.save(m, os.path.join(repo, "double_onnx", "1", "model.onnx"))
    with open(os.path.join(repo, "double_onnx", "config.pbtxt"), "w") as f:
        f.write('name: "double_onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
                'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
                'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')


def children(pid):
    """Pids of the direct children of pid. Read from every process's stat (its ppid is
    the parent's thread-group id) rather than /proc/pid/task/*/children: a child listed
    under the thread that forked it moves to another thread when that one exits, and a
    walk of the task files can miss it mid-move."""
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # comm may contain spaces and parentheses: fields resume after the last ')'
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.add(int(d))
    return out


def shm_in_use(pid):
    """The stubs' memfds (named cinfer-py*) that pid has open or mapped."""
    held = []
    for f in os.listdir(f"/proc/{pid}/fd"):
        try:
            t = os.readlink(f"/proc/{pid}/fd/{f}")
        except FileNotFoundError:
            continue
        if "cinfer-py" in t:
            held.append(t)
    with open(f"/proc/{pid}/maps") as f:
        held += [ln for ln in f if "cinfer-py" in ln]
    return held


def wait_for(cond, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def infer(c, model, inputs, outputs=None, **kw):
    ins = []
    for name, arr in inputs:
        dt = "BYTES" if arr.dtype == np.object_ else httpclient.np_to_triton_dtype(arr.dtype)
        i = httpclient.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr)
        ins.append(i)
    outs = [httpclient.InferRequestedOutput(o) for o in outputs] if outputs else None
    return c.infer(model, ins, outputs=outs, **kw)


@pytest.fixture(scope="module")
def repo():
    root = tempfile.mkdtemp(prefix="cinfer-py-")
    write_model(root, "add_sub", ADD_SUB_CONFIG.format(name="add_sub", extra="", count=2), ADD_SUB_PY)
    write_model(root, "faulty", FAULTY_CONFIG, FAULTY_PY)
    write_model(root, "hang", HANG_CONFIG, HANG_PY)
    write_model(root, "introspect", INTROSPECT_CONFIG, INTROSPECT_PY)
    write_model(root, "batched", BATCH_CONFIG, BATCH_PY)
    write_model(root, "auto", 'name: "auto"\nbackend: "python"\n', AUTO_PY)
    write_model(root, "repeat", REPEAT_CONFIG, REPEAT_PY)
    write_model(root, "bls", BLS_CONFIG, BLS_PY)
    write_double_onnx(root)
    copy_repo(["identity_fp32"], root)
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def server(repo):
    with Server(repo, startup_timeout=300) as s:  # eight models, each a Python process
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    with httpclient.InferenceServerClient(server.hostport, network_timeout=120) as c:
        yield c


def test_add_sub_and_two_instances_are_two_processes(server, client):
    assert client.is_model_ready("add_sub")
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([0.5, 0.25, -1, 8], dtype=np.float32)
    r = infer(client, "add_sub", [("INPUT0", a), ("INPUT1", b)], ["OUTPUT0", "OUTPUT1"])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    # Only what was asked for comes back.
    r = infer(client, "add_sub", [("INPUT0", a), ("INPUT1", b)], ["OUTPUT1"])
    assert r.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    log = "".join(server.log)
    assert "add_sub initialized as add_sub_0_0" in log and "add_sub initialized as add_sub_0_1" in log
    # instance_group count 2: two stub processes of their own among the server's children
    kids = children(server.proc.pid)
    cmdlines = []
    for k in kids:
        with open(f"/proc/{k}/cmdline", "rb") as f:
            cmdlines.append(f.read())
    assert len([c for c in cmdlines if b"cinfer_python_stub" in c]) >= 2 + 1  # add_sub x2 + others


def test_wrong_input_is_a_400(client):
    a = np.zeros(3, dtype=np.float32)
    with pytest.raises(InferenceServerException) as e:
        infer(client, "add_sub", [("INPUT0", a), ("INPUT1", a)])
    assert "400" in str(e.value.status()) or "shape" in str(e.value).lower()


def test_execute_raises_fails_that_request_only(client):
    with pytest.raises(InferenceServerException) as e:
        infer(client, "faulty", [("INPUT0", np.array([1], dtype=np.int32))])
    assert e.value.status() == "500"
    assert "the model refuses mode 1" in str(e.value) and "ValueError" in str(e.value)
    r = infer(client, "faulty", [("INPUT0", np.array([21], dtype=np.int32))])
    assert r.as_numpy("OUTPUT0")[0] == 42


def test_response_error_code_maps_to_http(client):
    with pytest.raises(InferenceServerException) as e:
        infer(client, "faulty", [("INPUT0", np.array([5], dtype=np.int32))])
    assert e.value.status() == "400" and "bad value 5" in str(e.value)


def test_wrong_number_of_responses_is_clear_and_dtype_passes_through(client):
    with pytest.raises(InferenceServerException) as e:
        infer(client, "faulty", [("INPUT0", np.array([6], dtype=np.int32))])
    assert "returned 0 responses for 1 requests" in str(e.value)
    # As on Triton, an output keeps the datatype the model gave it (Triton's own
    # bls_decoupled example returns INT64 for a TYPE_INT32 output).
    r = infer(client, "faulty", [("INPUT0", np.array([7], dtype=np.int32))])
    assert r.as_numpy("OUTPUT0").dtype == np.float64 and r.as_numpy("OUTPUT0")[0] == 7.0


def pid_of_faulty(client):
    r = infer(client, "faulty", [("INPUT0", np.array([10], dtype=np.int32))])
    assert r.as_numpy("OUTPUT0")[0] == 20
    return int(r.as_numpy("PID")[0])


@pytest.mark.parametrize("mode,expect", [
    (2, "was killed by signal 11"),
    (3, "exited with status 3"),
    (4, "execute() did not return within 1000 ms (parameter execute_timeout_ms)"),
])
def test_crash_exit_hang_fail_own_requests_and_restart(server, client, mode, expect):
    before = pid_of_faulty(client)
    with pytest.raises(InferenceServerException) as e:
        infer(client, "faulty", [("INPUT0", np.array([mode], dtype=np.int32))])
    msg = str(e.value)
    assert e.value.status() == "500", msg
    assert "instance faulty_0_0" in msg and expect in msg and "restarts" in msg, msg
    # the other models are unharmed
    a = np.ones(4, dtype=np.float32)
    r = infer(client, "add_sub", [("INPUT0", a), ("INPUT1", a)])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a * 2)
    # the instance comes back in a new process, and the old one is gone (reaped)
    after = pid_of_faulty(client)
    assert after != before
    assert not os.path.exists(f"/proc/{before}")
    assert client.is_server_live() and client.is_model_ready("faulty")


def test_a_hung_execute_whose_client_left_is_killed_and_restarted(server, client):
    """No execute_timeout_ms: the client goes away (its connection closes), the request is
    cancelled, and the process that does not return is killed so the instance serves again."""
    import http.client
    import socket

    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1],
                                   "data": [1]}]})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1)
    conn.request("POST", "/v2/models/hang/infer", body, {"Content-Type": "application/json"})
    with pytest.raises((socket.timeout, TimeoutError)):
        conn.getresponse()
    conn.close()
    r = infer(client, "hang", [("INPUT0", np.array([5], dtype=np.int32))])
    assert r.as_numpy("OUTPUT0")[0] == 5
    assert "every request of the batch was cancelled and execute() did not return" in "".join(server.log)


def test_bytes_parameters_id_and_args(client):
    text = np.array([b"hello", b"", b"\x00\xffbin"], dtype=np.object_)
    r = infer(client, "introspect", [("TEXT", text)], ["REVERSED", "INFO"], request_id="req-7",
              parameters={"temperature": 0.5, "tag": "x", "n": 3, "flag": True})
    assert list(r.as_numpy("REVERSED")) == [b"olleh", b"", b"nib\xff\x00"]
    info = json.loads(r.as_numpy("INFO")[0])
    assert info["id"] == "req-7"
    assert info["params"] == {"temperature": 0.5, "tag": "x", "n": 3, "flag": True}
    assert info["requested"] == ["REVERSED", "INFO"]
    assert info["cancelled"] is False
    assert info["dtype_in"] == "object"
    assert info["config_name"] == "introspect"
    args = info["args"]
    assert args["model_name"] == "introspect" and args["model_version"] == "1"
    assert args["model_instance_kind"] == "CPU" and args["model_instance_name"] == "introspect_0_0"
    assert args["model_repository"].endswith("/introspect")


def pending(url, model):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    m = re.search(r'^cinfer_pending_requests\{[^}]*model="%s"[^}]*\} (\S+)$' % model, text, re.M)
    return float(m.group(1)) if m else -1


def test_dynamic_batching_hands_execute_several_requests(server, client, repo):
    stats0 = client.get_inference_statistics("batched")["model_stats"][0]

    def one(x):
        with httpclient.InferenceServerClient(server.hostport, network_timeout=120) as c:
            return infer(c, "batched", [("INPUT0", x)])

    gate = np.full((1, 3), -1, dtype=np.float32)
    xs = [np.full((1, 3), i, dtype=np.float32) for i in range(4)]
    mdir = os.path.join(repo, "batched")
    with concurrent.futures.ThreadPoolExecutor(5) as ex:
        g = ex.submit(one, gate)
        wait_for(lambda: os.path.exists(os.path.join(mdir, "started")), "the gate request to run")
        futs = [ex.submit(one, x) for x in xs]
        wait_for(lambda: pending(server.url, "batched") == 4, "four queued requests")
        open(os.path.join(mdir, "release"), "w").close()
        assert g.result().as_numpy("NREQ")[0, 0] == 1
        results = [f.result() for f in futs]
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x + 1)
        assert r.as_numpy("NREQ")[0, 0] == 4  # the four queued ones: one execute()
    # The statistics are recorded when execute() returns in the server's worker, which can be
    # just after the responses reached the clients (slow under ASan): wait for them, bounded.
    def counts():
        st = client.get_inference_statistics("batched")["model_stats"][0]
        return (int(st.get("inference_count", 0)) - int(stats0.get("inference_count", 0)),
                int(st.get("execution_count", 0)) - int(stats0.get("execution_count", 0)))
    wait_for(lambda: counts()[0] >= 5, "the statistics of the five requests")
    assert counts() == (5, 2)


def test_auto_complete_fills_the_config(client):
    cfg = client.get_model_config("auto")
    assert cfg["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], [int(d) for d in i["dims"]]) for i in cfg["input"]] == [
        ("IN", "TYPE_INT64", [2])]
    assert [(o["name"], o["data_type"]) for o in cfg["output"]] == [("OUT", "TYPE_INT64")]
    assert "dynamic_batching" in cfg
    x = np.array([[1, 2], [3, 4]], dtype=np.int64)
    r = infer(client, "auto", [("IN", x)])
    np.testing.assert_array_equal(r.as_numpy("OUT"), x * 10)


def bls(client, which, x):
    return infer(client, "bls", [("X", x), ("WHICH", np.array([which.encode()], dtype=np.object_))])


def test_bls_calls_python_onnx_and_identity_models(client):
    x = np.array([1, 2, 3, 4], dtype=np.float32)
    np.testing.assert_array_equal(bls(client, "add_sub", x).as_numpy("Y"), x + x)
    np.testing.assert_array_equal(bls(client, "async_add_sub", x).as_numpy("Y"), x + x)
    np.testing.assert_array_equal(bls(client, "onnx", x).as_numpy("Y"), x * 2)
    np.testing.assert_array_equal(bls(client, "identity", x).as_numpy("Y"), x)


def test_bls_streams_a_decoupled_model(client):
    x = np.zeros(4, dtype=np.float32)
    np.testing.assert_array_equal(bls(client, "repeat", x).as_numpy("Y"), [0, 1, 4, 9])


def test_bls_error_reaches_the_model(client):
    with pytest.raises(InferenceServerException) as e:
        bls(client, "missing", np.zeros(4, dtype=np.float32))
    assert "BLS said:" in str(e.value) and "no_such_model" in str(e.value)


def test_statistics_count_python_models(client):
    s = client.get_inference_statistics("add_sub")["model_stats"][0]
    assert int(s["inference_count"]) >= 2 and int(s["execution_count"]) >= 2
    assert int(s["inference_stats"]["success"]["count"]) >= 2


def test_load_errors_name_the_model_and_cause():
    root = tempfile.mkdtemp(prefix="cinfer-py-bad-")
    try:
        write_model(root, "init_raises", 'name: "init_raises"\nbackend: "python"\n'
                    'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                    'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
                    "class TritonPythonModel:\n"
                    "    def initialize(self, args):\n"
                    "        raise RuntimeError('no weights here')\n"
                    "    def execute(self, requests):\n"
                    "        return []\n")
        write_model(root, "syntax", 'name: "syntax"\nbackend: "python"\n'
                    'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                    'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
                    "class TritonPythonModel(:\n")
        write_model(root, "packed_env", 'name: "packed_env"\nbackend: "python"\n'
                    'input [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                    'output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
                    'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "/x.tar.gz" } }\n',
                    ADD_SUB_PY)
        os.makedirs(os.path.join(root, "no_file", "1"))
        with open(os.path.join(root, "no_file", "config.pbtxt"), "w") as f:
            f.write('name: "no_file"\nbackend: "python"\n')
        write_model(root, "add_sub", ADD_SUB_CONFIG.format(name="add_sub", extra="", count=1),
                    ADD_SUB_PY)
        with Server(root, ["--strict-readiness", "false"]) as s:
            s.wait_ready()
            with httpclient.InferenceServerClient(s.hostport) as c:
                idx = {e["name"]: e for e in c.get_model_repository_index()}
                assert idx["add_sub"]["state"] == "READY"
                assert "initialize() failed: RuntimeError: no weights here" in idx["init_raises"]["reason"]
                assert "SyntaxError" in idx["syntax"]["reason"]
                assert "EXECUTION_ENV_PATH" in idx["packed_env"]["reason"]
                assert "model.py" in idx["no_file"]["reason"]
                a = np.ones(4, dtype=np.float32)
                np.testing.assert_array_equal(
                    infer(c, "add_sub", [("INPUT0", a), ("INPUT1", a)]).as_numpy("OUTPUT1"), a * 0)
            # no stub outlives a failed load
            wait_for(lambda: len(children(s.proc.pid)) == 1, "one stub process (add_sub)")
    finally:
        shutil.rmtree(root)


def test_unload_and_reload_stop_and_start_processes_cleanly():
    root = tempfile.mkdtemp(prefix="cinfer-py-ctl-")
    try:
        write_model(root, "add_sub", ADD_SUB_CONFIG.format(name="add_sub", extra="", count=3),
                    ADD_SUB_PY)
        with Server(root, ["--model-control-mode", "explicit", "--load-model", "add_sub"]) as s:
            s.wait_ready()
            with httpclient.InferenceServerClient(s.hostport) as c:
                wait_for(lambda: len(children(s.proc.pid)) == 3, "three stub processes")
                first = children(s.proc.pid)
                c.unload_model("add_sub")
                wait_for(lambda: len(children(s.proc.pid)) == 0, "no stub process after unload")
                for p in first:
                    assert not os.path.exists(f"/proc/{p}")
                c.load_model("add_sub")
                wait_for(lambda: c.is_model_ready("add_sub"), "add_sub ready again")
                assert len(children(s.proc.pid)) == 3 and not (children(s.proc.pid) & first)
                a = np.arange(4, dtype=np.float32)
                np.testing.assert_array_equal(
                    infer(c, "add_sub", [("INPUT0", a), ("INPUT1", a)]).as_numpy("OUTPUT0"), a * 2)
                # once unloaded, no shared memory of the stubs stays open or mapped in the
                # server (a loaded instance keeps its reused input/output regions)
                assert shm_in_use(s.proc.pid)
                c.unload_model("add_sub")
                wait_for(lambda: len(children(s.proc.pid)) == 0, "no stub process after unload")
                wait_for(lambda: not shm_in_use(s.proc.pid), "the server to hold no memfd")
    finally:
        shutil.rmtree(root)
