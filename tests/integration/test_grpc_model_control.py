"""Model control over gRPC follows the HTTP endpoint's rules (one set of rules, two
protocols): RepositoryModelLoad with "file:<path>" contents (bytes_param) into a temporary
model directory, "config", unload_dependents, and the same refusals of unknown or misplaced
parameters. With tritonclient.grpc against the real binary; the file_override case of
Triton's L0_lifecycle over gRPC needs this."""
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo
from test_model_control import ONNX_CONFIG, add_model


@pytest.fixture
def grpc_explicit(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    with Server(copy_repo(["identity_fp32"]), ["--model-control-mode", "explicit", "--load-model", "identity_fp32"]) as s:
        s.wait_ready()
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        yield c
        c.close()


def add_result(c, model):
    x = np.array([[1.0, 2.0]], np.float32)
    inp = grpcclient.InferInput("X", [1, 2], "FP32")
    inp.set_data_from_numpy(x)
    return (c.infer(model, [inp]).as_numpy("Y") - x).tolist()


def test_load_with_files_then_reload_and_unload(grpc_explicit):
    c = grpc_explicit
    c.load_model("addone", config=ONNX_CONFIG, files={"file:1/model.onnx": add_model(1.0)})
    assert add_result(c, "addone") == [[1.0, 1.0]]
    c.load_model("addone", config=ONNX_CONFIG, files={"file:1/model.onnx": add_model(2.0)})
    assert add_result(c, "addone") == [[2.0, 2.0]]
    c.unload_model("addone", unload_dependents=True)
    assert not c.is_model_ready("addone")
    assert c.is_model_ready("identity_fp32")


@pytest.mark.parametrize("call,kw,text", [
    ("load", dict(files={"file:1/model.onnx": b"x"}), "config"),  # files need a config, as on Triton
    ("load", dict(config=ONNX_CONFIG, files={"file:/abs/model.onnx": b"x"}), "file:"),
    ("load", dict(config=ONNX_CONFIG, files={"file:../up/model.onnx": b"x"}), "file:"),
])
def test_bad_file_overrides_are_refused(grpc_explicit, call, kw, text):
    with pytest.raises(InferenceServerException) as e:
        grpc_explicit.load_model("newmodel", **kw)
    assert text in str(e.value)
    assert grpc_explicit.is_model_ready("identity_fp32")


def test_misplaced_and_unknown_parameters_are_refused(grpc_explicit):
    c = grpc_explicit
    req = grpcclient.service_pb2.RepositoryModelLoadRequest(model_name="identity_fp32")
    req.parameters["confg"].string_param = "{}"
    with pytest.raises(Exception) as e:
        c._client_stub.RepositoryModelLoad(request=req, timeout=30)
    assert "load parameter 'confg' is not known" in str(e.value)
    req = grpcclient.service_pb2.RepositoryModelLoadRequest(model_name="identity_fp32")
    req.parameters["unload_dependents"].bool_param = True
    with pytest.raises(Exception) as e:
        c._client_stub.RepositoryModelLoad(request=req, timeout=30)
    assert "only valid for an unload" in str(e.value)
    ureq = grpcclient.service_pb2.RepositoryModelUnloadRequest(model_name="identity_fp32")
    ureq.parameters["unload_dependents"].string_param = "yes"
    with pytest.raises(Exception) as e:
        c._client_stub.RepositoryModelUnload(request=ureq, timeout=30)
    assert "'unload_dependents' must be a boolean" in str(e.value)
    assert c.is_model_ready("identity_fp32")
