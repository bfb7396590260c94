"""Behaviour Triton's own client examples and QA tests expect, found by scripts/triton_qa.sh
(issue 19), checked here with tritonclient and plain HTTP against the real binary."""
import json
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from cinfer_server import Server

os.environ["CINFER_PYTHON"] = sys.executable  # the Python backend's interpreter: this one, with numpy


def add_sub_model():
    """Triton's docs/examples `simple`, rebuilt: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    io = lambda n: helper.make_tensor_value_info(n, TensorProto.INT32, ["b", 16])
    g = helper.make_graph([helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                           helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], "simple",
                          [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7).SerializeToString()


@pytest.fixture
def simple_repo():
    d = tempfile.mkdtemp(prefix="cinfer-qa-")
    os.makedirs(os.path.join(d, "simple", "1"))
    with open(os.path.join(d, "simple", "1", "model.onnx"), "wb") as f:
        f.write(add_sub_model())
    with open(os.path.join(d, "simple", "config.pbtxt"), "w") as f:
        f.write('name: "simple"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n')
    yield d
    shutil.rmtree(d)


def infer_simple(c):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), np.int32)
    ins = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    ins[0].set_data_from_numpy(a)
    ins[1].set_data_from_numpy(b)
    r = c.infer("simple", ins)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)


def test_load_override_without_backend_is_auto_completed(simple_repo):
    """simple_http_model_control.py: load_model("simple", config='{"max_batch_size":"16"}')
    must load (Triton auto-completes the platform from model.onnx) and serve with the new
    max_batch_size; a malformed config still fails with "failed to load"."""
    with Server(simple_repo, ["--model-control-mode", "explicit"]) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        c.load_model("simple")
        assert c.get_model_config("simple")["max_batch_size"] == 8
        with pytest.raises(InferenceServerException, match="failed to load"):
            c.load_model("simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
        c.load_model("simple", config='{"max_batch_size":"16"}')
        cfg = c.get_model_config("simple")
        assert cfg["max_batch_size"] == 16
        assert cfg.get("backend") == "onnxruntime" or cfg.get("platform") == "onnxruntime_onnx", cfg
        infer_simple(c)
        # a folder whose files imply no backend still gets the clear error
        os.makedirs(os.path.join(simple_repo, "empty", "1"))
        with pytest.raises(InferenceServerException, match="neither 'backend' nor 'platform'"):
            c.load_model("empty", config=json.dumps({"max_batch_size": 4}))
        c.unload_model("simple")
        assert not c.is_model_ready("simple")
        c.close()


# A decoupled Python model shaped as Triton's L0_http mock_llm (written here from the
# python_backend API): PROMPT (BYTES) and STREAM (BOOL) required, input_ids optional; it
# answers PROMPT as TEXT `REPETITION` times, and with FAIL_FIRST set fails at once.
MOCK_CONFIG = """
name: "mock"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1, 1 ] },
        { name: "STREAM" data_type: TYPE_BOOL dims: [ 1, 1 ] },
        { name: "input_ids" data_type: TYPE_INT32 dims: [ 1, -1 ] optional: true } ]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

MOCK_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            params = json.loads(request.parameters())
            prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
            if params.get("FAIL_FIRST"):
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("mock failed")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            for _ in range(int(params.get("REPETITION", 1))):
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("TEXT", prompt)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@pytest.fixture(scope="module")
def mock_server():
    d = tempfile.mkdtemp(prefix="cinfer-qa-mock-")
    os.makedirs(os.path.join(d, "mock", "1"))
    with open(os.path.join(d, "mock", "config.pbtxt"), "w") as f:
        f.write(MOCK_CONFIG)
    with open(os.path.join(d, "mock", "1", "model.py"), "w") as f:
        f.write(MOCK_PY)
    try:
        # a 1 MiB JSON limit, so the size check is cheap to reach
        with Server(d, ["--http-max-input-size", str(1 << 20)]) as s:
            s.wait_ready()
            yield s
    finally:
        shutil.rmtree(d)


def post(s, path, body):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    req = urllib.request.Request(s.url + path, data=data.encode() if isinstance(data, str) else data,
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


@pytest.mark.parametrize("api", ["generate", "generate_stream"])
@pytest.mark.parametrize("body,text", [
    ({"PROMPT": 123, "STREAM": False}, "attempt to access JSON non-string as string"),
    ({"PROMPT": {"USER": "a"}, "STREAM": False}, "attempt to access JSON non-string as string"),
    ({"PROMPT": "hello", "STREAM": "false"}, "attempt to access JSON non-boolean as boolean"),
    ({"STREAM": 123, "PROMPT": True}, "attempt to access JSON non-boolean as boolean"),
    ('{"PROMPT": "hello", "STREAM": false, "PROMPT": "again"}', "input 'PROMPT' already exists in request"),
    ({}, "expected number of inputs between 2 and 3 but got 0 inputs for model 'mock'"),
    ({"STREAM": False, "other": "param"}, "expected number of inputs between 2 and 3 but got 1 inputs"),
    ({"PROMPT": "x" * (1 << 20), "STREAM": False},
     " bytes exceeds the maximum allowed input size of 1048576 bytes"),
])
def test_generate_refusals_use_tritons_texts(mock_server, api, body, text):
    """L0_http/generate_endpoint_test.py matches these texts; a refused request is plain JSON
    on both endpoints."""
    code, ctype, out = post(mock_server, f"/v2/models/mock/{api}", body)
    assert code == 400 and ctype == "application/json", out
    assert text in json.loads(out)["error"]


def test_generate_id_is_echoed_only_when_given(mock_server):
    for body, want in [({"PROMPT": "hi", "STREAM": False, "id": "42"}, "42"),
                       ({"PROMPT": "hi", "STREAM": False}, None),
                       ({"PROMPT": "hi", "STREAM": False, "id": ""}, None)]:
        code, ctype, out = post(mock_server, "/v2/models/mock/generate", body)
        assert code == 200 and ctype == "application/json", out
        got = json.loads(out)
        assert got["TEXT"] == "hi" and got.get("id") == want and ("id" in got) == (want is not None)


def sse_events(body):
    out = []
    for block in body.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            out.append(json.loads(block[len("data: "):]))
    return out


def test_generate_stream_error_first_is_an_sse_error_under_its_status(mock_server):
    code, ctype, out = post(mock_server, "/v2/models/mock/generate_stream",
                            {"PROMPT": "hi", "STREAM": True, "FAIL_FIRST": True})
    assert code == 500 and ctype == "text/event-stream; charset=utf-8", out
    assert sse_events(out) == [{"error": "mock failed"}]
    # and the normal stream is unchanged: 200, one event per response
    code, ctype, out = post(mock_server, "/v2/models/mock/generate_stream",
                            {"PROMPT": "hi", "STREAM": True, "REPETITION": 2})
    assert code == 200 and ctype == "text/event-stream; charset=utf-8", out
    assert [e["TEXT"] for e in sse_events(out)] == ["hi", "hi"]


IDENTITY_PY_CONFIG = """
name: "py_identity"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
"""


def test_grpc_unary_infer_of_a_python_model_that_is_not_decoupled():
    """simple_grpc_string_infer_client.py, L0_string_io and L0_parameters call ModelInfer on
    Python models without decoupled: it answers as Triton does; a decoupled one is still
    refused with Triton's text."""
    import tritonclient.grpc as grpcclient
    d = tempfile.mkdtemp(prefix="cinfer-qa-py-")
    try:
        for name, cfg, py in [("py_identity", IDENTITY_PY_CONFIG, IDENTITY_PY), ("mock", MOCK_CONFIG, MOCK_PY)]:
            os.makedirs(os.path.join(d, name, "1"))
            with open(os.path.join(d, name, "config.pbtxt"), "w") as f:
                f.write(cfg)
            with open(os.path.join(d, name, "1", "model.py"), "w") as f:
                f.write(py)
        with Server(d) as s:
            s.wait_ready()
            c = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
            x = np.array([b"a", "ü".encode(), b""], dtype=np.object_)
            i = grpcclient.InferInput("INPUT0", [3], "BYTES")
            i.set_data_from_numpy(x)
            np.testing.assert_array_equal(c.infer("py_identity", [i]).as_numpy("OUTPUT0"), x)
            p = grpcclient.InferInput("PROMPT", [1, 1], "BYTES")
            p.set_data_from_numpy(np.array([[b"hi"]], dtype=np.object_))
            st = grpcclient.InferInput("STREAM", [1, 1], "BOOL")
            st.set_data_from_numpy(np.array([[False]]))
            with pytest.raises(InferenceServerException, match="decoupled transaction policy"):
                c.infer("mock", [p, st])
            c.close()
    finally:
        shutil.rmtree(d)


def test_restricted_api_text_is_tritons(simple_repo):
    """L0_http/http_restricted_api_test.py matches "This API is restricted"."""
    args = ["--http-restricted-api", "inference,metadata:infer-key=infer-value"]
    with Server(simple_repo, args) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        with pytest.raises(InferenceServerException,
                           match=r"This API is restricted, expecting header 'infer-key' \(API group 'metadata'\)"):
            c.get_model_metadata("simple")
        c2 = httpclient.InferenceServerClient(s.hostport)
        assert c2.get_model_metadata("simple", headers={"infer-key": "infer-value"})["name"] == "simple"
        c.close()
        c2.close()


def test_repository_index_ready_must_be_a_boolean(simple_repo):
    with Server(simple_repo) as s:
        s.wait_ready()
        code, _, out = post(s, "/v2/repository/index", {"ready": [True]})
        assert code == 400 and "Invalid value for 'ready': expected a boolean" in json.loads(out)["error"]
        code, _, out = post(s, "/v2/repository/index", {"ready": True})
        assert code == 200 and [m["name"] for m in json.loads(out)] == ["simple"]


def test_grpc_model_ready_of_a_version_not_loaded_is_false(simple_repo):
    """L0_lifecycle test_file_override: is_model_ready(model, "2") of a model serving only
    version 1 is False over gRPC as over HTTP (Triton), not an error; an unknown model is
    still NOT_FOUND."""
    import tritonclient.grpc as grpcclient
    with Server(simple_repo) as s:
        s.wait_ready()
        g = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        h = httpclient.InferenceServerClient(s.hostport)
        assert g.is_model_ready("simple", "1") and h.is_model_ready("simple", "1")
        assert not g.is_model_ready("simple", "2")
        assert not h.is_model_ready("simple", "2")
        with pytest.raises(InferenceServerException, match="simple_nope"):
            g.is_model_ready("simple_nope")
        g.close()
        h.close()


def test_ensemble_with_a_python_step_that_is_not_decoupled_over_grpc_unary():
    """L0_simple_ensemble test_ensemble_partial_add_sub: an ensemble whose steps include a
    Python model without decoupled is a plain model: gRPC ModelInfer serves it, and the
    Python step may feed another step."""
    import tritonclient.grpc as grpcclient
    d = tempfile.mkdtemp(prefix="cinfer-qa-ens-")
    try:
        os.makedirs(os.path.join(d, "py_identity", "1"))
        with open(os.path.join(d, "py_identity", "config.pbtxt"), "w") as f:
            f.write(IDENTITY_PY_CONFIG)
        with open(os.path.join(d, "py_identity", "1", "model.py"), "w") as f:
            f.write(IDENTITY_PY)
        os.makedirs(os.path.join(d, "twice", "1"))
        with open(os.path.join(d, "twice", "config.pbtxt"), "w") as f:
            f.write("""name: "twice"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "py_identity" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "py_identity" model_version: -1
    input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
""")
        with Server(d) as s:
            s.wait_ready()
            c = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
            x = np.array([b"x", b"yz"], dtype=np.object_)
            i = grpcclient.InferInput("IN", [2], "BYTES")
            i.set_data_from_numpy(x)
            np.testing.assert_array_equal(c.infer("twice", [i]).as_numpy("OUT"), x)
            c.close()
    finally:
        shutil.rmtree(d)
