"""Decoupled Python models streamed to clients: gRPC ModelStreamInfer (tritonclient.grpc, as
Triton's examples/decoupled square_client.py and repeat_client.py use it) and HTTP
generate_stream (server-sent events, read with urllib as curl would). The two models
follow the semantics of Triton's `decoupled` example (square_int32: IN = n answers n
responses of OUT = n, then a flag-only FINAL; repeat_int32: one response per element of IN
with OUT and IDX, sent from a thread after DELAY ms each, execute() returning after WAIT
ms); they are written here from the documented python_backend API, not copied. Several
responses per request, the final flag, and errors in the middle of a stream are checked."""
import json
import os
import queue
import shutil
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server

os.environ["CINFER_PYTHON"] = sys.executable

SQUARE_CONFIG = """
name: "square_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# IN = n >= 0: n responses OUT = n, the first from execute() itself and the others from a
# thread (so one request's responses come from two threads), then the flag-only FINAL.
# IN = -n: n responses from execute() itself, then execute() raises (an error mid-stream).
SQUARE_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.lock = threading.Lock()
        self.threads = []

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            if n < 0:
                for _ in range(-n):
                    sender.send(pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUT", np.array([n], dtype=np.int32))]))
                raise pb_utils.TritonModelException(f"square of {n}: negative input")
            if n > 0:
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUT", np.array([n], dtype=np.int32))]))
            t = threading.Thread(target=self.respond, args=(sender, n - 1), daemon=True)
            with self.lock:
                self.threads.append(t)
            t.start()
        return None

    def respond(self, sender, rest):
        for _ in range(max(rest, 0)):
            sender.send(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUT", np.array([rest + 1], dtype=np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        with self.lock:
            for t in self.threads:
                t.join(30)
"""

REPEAT_CONFIG = """
name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
        { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

# One response per element (OUT, IDX) after DELAY[i] ms; a negative element is an error
# response with the FINAL flag: the stream ends there with that error.
REPEAT_PY = """
import threading
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            vals = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().copy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().copy()
            wait = int(pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()[0])
            sender = request.get_response_sender()
            threading.Thread(target=self.respond, args=(sender, vals, delays), daemon=True).start()
            time.sleep(wait / 1000.0)
        return None

    def respond(self, sender, vals, delays):
        for i, v in enumerate(vals):
            time.sleep(float(delays[i]) / 1000.0)
            if v < 0:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"repeat: element {i} is negative ({v})", pb_utils.TritonError.INVALID_ARG)),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([v], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""


def write_model(repo, name, config, py):
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(textwrap.dedent(config))
    with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
        f.write(textwrap.dedent(py))


@pytest.fixture(scope="module")
def server():
    repo = tempfile.mkdtemp(prefix="cinfer-pystream-")
    write_model(repo, "square_int32", SQUARE_CONFIG, SQUARE_PY)
    write_model(repo, "repeat_int32", REPEAT_CONFIG, REPEAT_PY)
    try:
        with Server(repo) as s:
            s.wait_ready()
            assert s.grpc_port
            s.grpc_url = f"127.0.0.1:{s.grpc_port}"
            yield s
    finally:
        shutil.rmtree(repo)


def stream_collect(server, sends, expect_finals, empty_final=False):
    """Sends [(model, inputs, request_id)] on one stream; collects (id, result or error)
    until `expect_finals` requests have ended (an error or, with empty_final, the flag)."""
    q = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as c:
        c.start_stream(callback=lambda result, error: q.put((result, error)))
        for model, inputs, rid in sends:
            c.async_stream_infer(model, inputs, request_id=rid,
                                 enable_empty_final_response=empty_final)
        got, ended = [], 0
        while ended < expect_finals:
            r, e = q.get(timeout=60)
            got.append((r, e))
            if e is not None:
                ended += 1
            elif empty_final and r.get_response().parameters["triton_final_response"].bool_param:
                ended += 1
        c.stop_stream()
    return got


def square_input(n):
    i = grpcclient.InferInput("IN", [1], "INT32")
    i.set_data_from_numpy(np.array([n], dtype=np.int32))
    return [i]


def repeat_inputs(vals, delays, wait):
    arrs = [("IN", np.array(vals, dtype=np.int32)), ("DELAY", np.array(delays, dtype=np.uint32)),
            ("WAIT", np.array([wait], dtype=np.uint32))]
    out = []
    for name, a in arrs:
        i = grpcclient.InferInput(name, list(a.shape), "INT32" if a.dtype == np.int32 else "UINT32")
        i.set_data_from_numpy(a)
        out.append(i)
    return out


def test_grpc_square_client_semantics(server):
    """What square_client.py checks: requests [4, 2, 0, 1] in parallel on one stream get 4, 2,
    0 and 1 responses, each OUT = its input; with the empty final response every request
    ends with a flag-only response (also the one that had no response at all)."""
    in_values = [4, 2, 0, 1]
    got = stream_collect(server, [("square_int32", square_input(v), str(k))
                                  for k, v in enumerate(in_values)], len(in_values), empty_final=True)
    per_id, finals = {}, {}
    for r, e in got:
        assert e is None, e
        resp = r.get_response()
        final = resp.parameters["triton_final_response"].bool_param
        if final:
            assert len(resp.outputs) == 0
            assert resp.id not in finals
            finals[resp.id] = len(per_id.get(resp.id, []))
        else:
            assert resp.id not in finals, "a response after the final one"
            per_id.setdefault(resp.id, []).append(r.as_numpy("OUT"))
    assert finals == {str(k): v for k, v in enumerate(in_values)}
    for k, v in enumerate(in_values):
        outs = per_id.get(str(k), [])
        assert len(outs) == v
        for o in outs:
            assert o.dtype == np.int32 and o.tolist() == [v]


def test_grpc_repeat_order_and_idx(server):
    """repeat_client.py's check: the responses of one request come in order, IDX 0..n-1, OUT
    the elements; responses are sent by the model's thread while execute() has returned."""
    vals = [4, 2, 0, 1, 9]
    got = stream_collect(server, [("repeat_int32", repeat_inputs(vals, [1] * 5, 5), "rep")], 1,
                         empty_final=True)
    outs = [(int(r.as_numpy("OUT")[0]), int(r.as_numpy("IDX")[0])) for r, e in got
            if e is None and not r.get_response().parameters["triton_final_response"].bool_param]
    assert outs == [(v, i) for i, v in enumerate(vals)]
    assert all(e is None for _, e in got)


def test_grpc_error_mid_stream_after_responses(server):
    """An error response after two good ones: the client gets the two, then the error (a
    stream carries errors as text, as on Triton); the stream carries on for other requests."""
    got = stream_collect(server, [("repeat_int32", repeat_inputs([5, 6, -3, 7], [0, 0, 0, 0], 0), "bad"),
                                  ("square_int32", square_input(2), "ok")], 2, empty_final=True)
    bad = [(r, e) for r, e in got if (e is not None) or r.get_response().id == "bad"]
    good = [r for r, e in got if e is None and r.get_response().id == "ok"]
    outs = [int(r.as_numpy("OUT")[0]) for r, e in bad if e is None]
    errs = [e for _, e in bad if e is not None]
    assert outs == [5, 6]
    assert len(errs) == 1 and "repeat: element 2 is negative (-3)" in str(errs[0])
    assert [int(r.as_numpy("OUT")[0]) for r in good if len(r.get_response().outputs)] == [2, 2]


def test_grpc_execute_raises_after_responses(server):
    """execute() sends three responses itself, then raises: the three arrive, then the
    exception's text ends the request."""
    got = stream_collect(server, [("square_int32", square_input(-3), "raise")], 1)
    outs = [int(r.as_numpy("OUT")[0]) for r, e in got if e is None]
    errs = [e for _, e in got if e is not None]
    assert outs == [-3, -3, -3]
    assert len(errs) == 1 and "square of -3: negative input" in str(errs[0])


def sse(server, model, body):
    req = urllib.request.Request(f"{server.url}/v2/models/{model}/generate_stream",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def events(body):
    out = []
    for block in body.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            out.append(json.loads(block[len("data: "):]))
    return out


def test_generate_stream_one_event_per_response(server):
    code, ctype, body = sse(server, "repeat_int32", {"IN": [3, 1, 4], "DELAY": [0, 0, 0], "WAIT": 0})
    assert code == 200 and ctype.startswith("text/event-stream"), body
    assert events(body) == [{"model_name": "repeat_int32", "model_version": "1", "OUT": v, "IDX": i}
                            for i, v in enumerate([3, 1, 4])]
    code, _, body = sse(server, "square_int32", {"IN": 3})
    assert code == 200 and events(body) == [{"model_name": "square_int32", "model_version": "1",
                                             "OUT": 3}] * 3


def test_generate_stream_no_response_is_an_empty_stream(server):
    code, ctype, body = sse(server, "square_int32", {"IN": 0})
    assert code == 200 and ctype.startswith("text/event-stream") and events(body) == []


def test_generate_stream_error_mid_stream_is_an_error_event(server):
    code, _, body = sse(server, "repeat_int32", {"IN": [7, 8, -1, 9], "DELAY": [0, 0, 0, 0], "WAIT": 0})
    assert code == 200, body  # the status line went out with the first event (as Triton)
    evs = events(body)
    assert [e.get("OUT") for e in evs[:2]] == [7, 8]
    assert len(evs) == 3 and "repeat: element 2 is negative (-1)" in evs[2]["error"]
    code, _, body = sse(server, "square_int32", {"IN": -2})
    evs = events(body)
    assert code == 200 and [e.get("OUT") for e in evs[:2]] == [-2, -2]
    assert len(evs) == 3 and "square of -2: negative input" in evs[2]["error"]


def test_generate_stream_error_as_first_response_is_an_error_event(server):
    """As Triton: the first response is an error, so its status and one SSE error event."""
    code, ctype, body = sse(server, "repeat_int32", {"IN": [-5], "DELAY": [0], "WAIT": 0})
    assert code == 400 and ctype == "text/event-stream; charset=utf-8", body
    (ev,) = events(body)
    assert "repeat: element 0 is negative (-5)" in ev["error"]


def test_generate_for_one_response_and_refused_for_several(server):
    req = urllib.request.Request(f"{server.url}/v2/models/square_int32/generate",
                                 data=json.dumps({"IN": 1}).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        assert json.loads(r.read()) == {"model_name": "square_int32", "model_version": "1", "OUT": 1}
    req = urllib.request.Request(f"{server.url}/v2/models/square_int32/generate",
                                 data=json.dumps({"IN": 2}).encode())
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    assert e.value.code == 400
    assert "generate expects model to produce exactly 1 response" in json.loads(e.value.read())["error"]


def test_stream_unharmed_after_errors(server):
    """After the errors above the models still answer (the instances were not restarted)."""
    got = stream_collect(server, [("square_int32", square_input(2), "again")], 1, empty_final=True)
    assert [int(r.as_numpy("OUT")[0]) for r, e in got if e is None and len(r.get_response().outputs)] == [2, 2]
    with pytest.raises(InferenceServerException):
        with grpcclient.InferenceServerClient(server.grpc_url) as c:
            c.infer("square_int32", square_input(1))  # decoupled: unary gRPC refuses it
