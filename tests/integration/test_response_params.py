"""Response parameters (Triton's parameters extension, on responses) and Triton's ensemble rules
that use them, against the real binary with tritonclient HTTP and gRPC and curl-style JSON:

- a Python model's InferenceResponse(parameters={...}) reaches the client over HTTP infer
  (the response's "parameters" object), gRPC ModelInfer and ModelStreamInfer (the
  parameters map, beside triton_final_response) and generate (top-level fields); it was
  accepted and silently dropped before;
- a value Triton's stub refuses (a float, a list) fails that request with Triton's text;
- an ensemble whose step does not return a mapped output answers the outputs it has and
  logs "Composing models did not output tensor NAME" (L0_simple_ensemble's
  test_ensemble_partial_add_sub), instead of failing the request;
- an ensemble's response carries sequence_id / sequence_start / sequence_end, the request's
  values (L0_simple_ensemble's test_ensemble_sequence_flags), or the ones a step's response
  overrides them with."""
import json
import os
import queue
import sys
import tempfile
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, write_model

os.environ["CINFER_PYTHON"] = sys.executable

PARAMS_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            mode = json.loads(r.parameters()).get("mode", "ok")
            try:
                if mode == "float":
                    params = {"ratio": 0.5}
                elif mode == "list":
                    params = {"ids": [1, 2]}
                elif mode == "seq":
                    params = {"sequence_id": 77, "sequence_end": True}
                else:
                    params = {"label": "cat \\"quoted\\"", "count": int(x.sum()), "big": -2**63,
                              "flag": True, "off": False}
                out.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", x * 2)], parameters=params))
            except pb_utils.TritonModelException as e:
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))))
        return out
"""
PARAMS_CFG = """
name: "params"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""

DECOUPLED_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            s = r.get_response_sender()
            for i in range(3):
                s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + i)],
                                                  parameters={"index": i, "last": i == 2}))
            s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
DECOUPLED_CFG = """
name: "params_stream"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
model_transaction_policy { decoupled: true }
"""

BLS_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0")
            resp = pb_utils.InferenceRequest(model_name="params", inputs=[x],
                                             requested_output_names=["OUTPUT0"]).exec()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "PARAMS", np.array([resp.parameters().encode()], dtype=object))]))
        return out
"""
BLS_CFG = """
name: "bls"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

PARTIAL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b)]))  # no OUTPUT1
        return out
"""
PARTIAL_CFG = """
name: "partial"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] } ]
"""
ENS_PARTIAL_CFG = """
name: "ens_partial"
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_INT32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 4 ] },
         { name: "DIFF" data_type: TYPE_INT32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "partial" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } } ] }
"""
ENS_PARAMS_CFG = """
name: "ens_params"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "params" model_version: -1
  input_map { key: "INPUT0" value: "X" } output_map { key: "OUTPUT0" value: "Y" } } ] }
"""


@pytest.fixture(scope="module")
def server():
    d = tempfile.mkdtemp(prefix="cinfer-rparams-")
    write_model(d, "params", PARAMS_CFG, PARAMS_PY)
    write_model(d, "params_stream", DECOUPLED_CFG, DECOUPLED_PY)
    write_model(d, "partial", PARTIAL_CFG, PARTIAL_PY)
    write_model(d, "bls", BLS_CFG, BLS_PY)
    write_model(d, "ens_partial", ENS_PARTIAL_CFG)
    write_model(d, "ens_params", ENS_PARAMS_CFG)
    with Server(d, args=["--log-verbose", "1"]) as s:
        s.wait_ready()
        yield s


X = np.array([[1, 2, 3, 4]], dtype=np.int32)
EXPECTED = {"label": 'cat "quoted"', "count": 10, "big": -2**63, "flag": True, "off": False}


def grpc_params(resp):
    """The parameters map of a gRPC ModelInferResponse as a dict of plain values."""
    out = {}
    for k, v in resp.parameters.items():
        out[k] = getattr(v, v.WhichOneof("parameter_choice"))
    return out


def infer(server, proto, model, inputs, parameters=None):
    mod, url = (grpcclient, f"127.0.0.1:{server.grpc_port}") if proto == "grpc" else (httpclient, server.hostport)
    c = mod.InferenceServerClient(url)
    ins = []
    for name, a in inputs.items():
        t = mod.InferInput(name, list(a.shape), "INT32")
        t.set_data_from_numpy(a)
        ins.append(t)
    return c.infer(model, ins, parameters=parameters)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_python_response_parameters_reach_the_client(server, proto):
    r = infer(server, proto, "params", {"INPUT0": X})
    assert r.as_numpy("OUTPUT0").tolist() == (X * 2).tolist()
    got = r.get_response()["parameters"] if proto == "http" else grpc_params(r.get_response())
    assert got == EXPECTED


def test_bls_caller_reads_the_called_models_response_parameters(server):
    r = infer(server, "http", "bls", {"INPUT0": X})
    assert json.loads(r.as_numpy("PARAMS")[0]) == EXPECTED


def test_generate_puts_response_parameters_at_top_level(server):
    body = json.dumps({"INPUT0": [1, 2, 3, 4]}).encode()
    req = urllib.request.Request(server.url + "/v2/models/params/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        out = json.loads(resp.read())
    assert out["OUTPUT0"] == [2, 4, 6, 8]
    for k, v in EXPECTED.items():
        assert out[k] == v, (k, out)


@pytest.mark.parametrize("mode,kind", [("float", "float"), ("list", "list")])
@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_a_value_triton_refuses_fails_the_request_with_its_type(server, proto, mode, kind):
    with pytest.raises(InferenceServerException) as e:
        infer(server, proto, "params", {"INPUT0": X}, parameters={"mode": mode})
    assert f"Expect parameters values to have type bool/int/str, found type {kind}" in str(e.value)
    r = infer(server, proto, "params", {"INPUT0": X})  # the model keeps serving
    assert r.as_numpy("OUTPUT0").tolist() == (X * 2).tolist()


def test_streamed_responses_carry_their_parameters_and_the_final_marker(server):
    q = queue.Queue()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        t = grpcclient.InferInput("INPUT0", [4], "INT32")
        t.set_data_from_numpy(X[0])
        c.async_stream_infer("params_stream", [t], enable_empty_final_response=True)
        seen = []
        while True:
            result, error = q.get(timeout=60)
            assert error is None, error
            p = grpc_params(result.get_response())
            seen.append(p)
            if p.get("triton_final_response"):
                break
    finally:
        c.stop_stream()
    assert seen[:3] == [{"index": i, "last": i == 2, "triton_final_response": False} for i in range(3)]
    assert seen[3] == {"triton_final_response": True}


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_ensemble_answers_the_outputs_its_step_returned(server, proto):
    b = np.array([[10, 20, 30, 40]], dtype=np.int32)
    r = infer(server, proto, "ens_partial", {"A": X, "B": b})
    assert r.as_numpy("SUM").tolist() == (X + b).tolist()
    assert r.as_numpy("DIFF") is None
    # The log is read by another thread: wait (bounded) for the line.
    deadline = time.monotonic() + 30
    while "Composing models did not output tensor DIFF" not in "".join(server.log):
        assert time.monotonic() < deadline, "".join(server.log)
        time.sleep(0.05)


def test_ensemble_response_carries_the_request_sequence_flags(server):
    """Triton's test_ensemble_sequence_flags: three requests of one sequence on a stream."""
    q = queue.Queue()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    try:
        t = grpcclient.InferInput("X", [1, 4], "INT32")
        t.set_data_from_numpy(X)
        flags = [(True, False), (False, False), (False, True)]
        for i, (start, end) in enumerate(flags):
            c.async_stream_infer("ens_params", [t], request_id=f"r{i}", sequence_id=4242,
                                 sequence_start=start, sequence_end=end)
        got = {}
        for _ in flags:
            result, error = q.get(timeout=60)
            assert error is None, error
            resp = result.get_response()
            got[resp.id] = grpc_params(resp)
    finally:
        c.stop_stream()
    for i, (start, end) in enumerate(flags):
        assert got[f"r{i}"] == {"sequence_id": 4242, "sequence_start": start, "sequence_end": end}


def test_ensemble_without_a_sequence_says_so(server):
    r = infer(server, "http", "ens_params", {"X": X})
    assert r.as_numpy("Y").tolist() == (X * 2).tolist()
    assert r.get_response()["parameters"] == {"sequence_id": 0, "sequence_start": False,
                                              "sequence_end": False}


def test_a_step_may_override_the_sequence_parameters(server):
    r = infer(server, "grpc", "ens_params", {"X": X}, parameters={"mode": "seq"})
    assert grpc_params(r.get_response()) == {"sequence_id": 77, "sequence_start": False,
                                             "sequence_end": True}
