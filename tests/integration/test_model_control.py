"""Model control as Triton does it (issue 19, item 6), against the real binary with
tritonclient: load with "file:" contents (base64) into a temporary model directory,
unload_dependents, refusal outside explicit mode, the repository index in poll mode."""
import base64
import glob
import json
import os
import shutil
import urllib.error
import urllib.request

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo


def add_model(c):
    """ONNX: Y = X + c (FP32, shape [N, 2]); the constant tells which file is serving."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2])
    k = numpy_helper.from_array(np.array([c], np.float32), "k")
    g = helper.make_graph([helper.make_node("Add", ["X", "k"], ["Y"])], "add", [x], [y], initializer=[k])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7).SerializeToString()


ONNX_CONFIG = json.dumps({"platform": "onnxruntime_onnx"})  # the rest is auto-completed


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def infer_add(c, model):
    x = np.array([[1.0, 2.0]], np.float32)
    inp = httpclient.InferInput("X", [1, 2], "FP32")
    inp.set_data_from_numpy(x)
    return c.infer(model, [inp]).as_numpy("Y") - x


def infer_identity(c, model="identity_fp32"):
    x = np.array([[1.5, -2.0]], np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(c.infer(model, [inp]).as_numpy("OUTPUT0"), x)


@pytest.fixture
def explicit(tmp_path, monkeypatch):
    """An explicit-mode server whose temporary model directories go under tmp_path/tmp."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    repo = copy_repo(["identity_fp32"])
    try:
        with Server(repo, ["--model-control-mode", "explicit", "--load-model", "identity_fp32"]) as s:
            s.wait_ready()
            s.tmp = tmp
            s.client = httpclient.InferenceServerClient(s.hostport)
            yield s
            s.client.close()
    finally:
        shutil.rmtree(repo)


def override_dirs(s):
    return glob.glob(str(s.tmp / "cinfer-model-*"))


def test_file_override_loads_a_model_not_in_the_repository(explicit):
    c = explicit.client
    c.load_model("addone", config=ONNX_CONFIG, files={"file:1/model.onnx": add_model(1.0)})
    assert c.is_model_ready("addone", "1")
    np.testing.assert_array_equal(infer_add(c, "addone"), [[1.0, 1.0]])
    (d,) = override_dirs(explicit)
    assert os.path.isfile(os.path.join(d, "1", "model.onnx"))
    # a reload with other contents serves them; the old directory is gone
    c.load_model("addone", config=ONNX_CONFIG, files={"file:1/model.onnx": add_model(2.0)})
    np.testing.assert_array_equal(infer_add(c, "addone"), [[2.0, 2.0]])
    (d2,) = override_dirs(explicit)
    assert d2 != d
    c.unload_model("addone")
    assert not c.is_model_ready("addone")
    assert override_dirs(explicit) == []


def test_file_override_of_a_repository_model_then_back(explicit):
    c = explicit.client
    infer_identity(c)
    c.load_model("identity_fp32", config=ONNX_CONFIG, files={"file:3/model.onnx": add_model(5.0)})
    # served from the override directory: its version 3, the ONNX model
    assert c.is_model_ready("identity_fp32", "3")
    assert not c.is_model_ready("identity_fp32", "1")
    np.testing.assert_array_equal(infer_add(c, "identity_fp32"), [[5.0, 5.0]])
    # a load without files goes back to the repository and removes the directory
    c.load_model("identity_fp32")
    assert c.is_model_ready("identity_fp32", "1")
    infer_identity(c)
    assert override_dirs(explicit) == []


def test_file_override_without_config_is_refused(explicit):
    c = explicit.client
    with pytest.raises(InferenceServerException,
                       match="failed to load 'identity_fp32', failed to poll from model repository"):
        c.load_model("identity_fp32", files={"file:1/model.onnx": add_model(1.0)})
    infer_identity(c)  # the loaded version keeps serving
    assert override_dirs(explicit) == []


@pytest.mark.parametrize("path", ["../escape.onnx", "1/../../escape.onnx", "/tmp/escape.onnx",
                                  "1//model.onnx", "./1/model.onnx", "1/.", ""])
def test_file_paths_out_of_the_directory_are_refused(explicit, path):
    c = explicit.client
    with pytest.raises(InferenceServerException, match="failed to load 'newmodel'") as e:
        c.load_model("newmodel", config=ONNX_CONFIG, files={f"file:{path}": add_model(1.0)})
    assert "model file path" in str(e.value)
    assert override_dirs(explicit) == []  # nothing made, nothing left
    assert not os.path.exists(explicit.tmp / "escape.onnx")
    assert not os.path.exists("/tmp/escape.onnx")
    infer_identity(c)


def test_bad_base64_is_a_400(explicit):
    for value, why in [("!!!!", "invalid base64"), ("abc", "not a multiple of 4"),
                       (17, "must be a string")]:
        code, body = post(explicit.url, "/v2/repository/models/newmodel/load",
                          {"parameters": {"config": ONNX_CONFIG, "file:1/model.onnx": value}})
        assert code == 400 and why in body["error"], body
        assert "'file:1/model.onnx'" in body["error"], body
    assert override_dirs(explicit) == []


def test_a_model_file_the_backend_rejects_fails_the_load_and_cleans_up(explicit):
    c = explicit.client
    with pytest.raises(InferenceServerException, match="load failed for model 'broken': version 1 is at UNAVAILABLE state"):
        c.load_model("broken", config=ONNX_CONFIG,
                     files={"file:1/model.onnx": b"this is not an ONNX model"})
    assert not c.is_model_ready("broken")
    assert override_dirs(explicit) == []


def test_unload_dependents_parameter(explicit):
    c = explicit.client
    c.load_model("addone", config=ONNX_CONFIG, files={"file:1/model.onnx": add_model(1.0)})
    # tritonclient sends {"parameters": {"unload_dependents": true}}; a plain model has no
    # dependents: it alone goes, the others stay
    c.unload_model("addone", unload_dependents=True)
    assert not c.is_model_ready("addone")
    infer_identity(c)
    code, body = post(explicit.url, "/v2/repository/models/identity_fp32/unload",
                      {"parameters": {"unload_dependents": "yes"}})
    assert code == 400 and "'unload_dependents' must be a boolean" in body["error"], body
    code, body = post(explicit.url, "/v2/repository/models/identity_fp32/load",
                      {"parameters": {"unload_dependents": True}})
    assert code == 400 and "only valid for an unload" in body["error"], body
    code, body = post(explicit.url, "/v2/repository/models/identity_fp32/load",
                      {"parameters": {"confg": "{}"}})
    assert code == 400 and "'confg' is not known" in body["error"], body
    infer_identity(c)


def test_server_metadata_lists_unload_dependents(explicit):
    ext = explicit.client.get_server_metadata()["extensions"]
    assert "model_repository(unload_dependents)" in ext


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_outside_explicit_mode_files_are_refused_and_the_index_allowed(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    repo = copy_repo(["identity_fp32"])
    args = ["--model-control-mode", mode] + (["--repository-poll-secs", "1"] if mode == "poll" else [])
    try:
        with Server(repo, args) as s:
            s.wait_ready()
            c = httpclient.InferenceServerClient(s.hostport)
            with pytest.raises(InferenceServerException,
                               match="explicit model load / unload is not allowed if polling is enabled"):
                c.load_model("addone", config=ONNX_CONFIG, files={"file:1/model.onnx": add_model(1.0)})
            with pytest.raises(InferenceServerException,
                               match="explicit model load / unload is not allowed if polling is enabled"):
                c.unload_model("identity_fp32", unload_dependents=True)
            assert glob.glob(str(tmp_path / "cinfer-model-*")) == []
            # POST /v2/repository/index is allowed in every mode (Triton)
            index = c.get_model_repository_index()
            assert {"name": "identity_fp32", "version": "1", "state": "READY", "reason": ""} in index
            infer_identity(c)
            c.close()
    finally:
        shutil.rmtree(repo)
