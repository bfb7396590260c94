"""Backend ABI 2.0 end to end: `cinfer serve --backend-directory DIR` loads a backend that
is not built in from DIR/<name>/libcinfer_<name>.so (the identity backend built as a shared
object, "identity_so"), serves it to tritonclient, and fails only the model whose library
was built for another ABI major (or is missing), with a reason naming the versions / path."""
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
import tritonclient.http as httpclient

from cinfer_server import BIN, Server

# The ABI version this source tree's core has (the bad backend is built for major - 1).
_HDR = open(os.path.join(os.path.dirname(__file__), "..", "..", "include", "cinfer", "backend.h")).read()
MAJOR = int(re.search(r"#define CINFER_BACKEND_ABI_MAJOR (\d+)", _HDR).group(1))
MINOR = int(re.search(r"#define CINFER_BACKEND_ABI_MINOR (\d+)", _HDR).group(1))

BUILD = os.environ.get("CINFER_BUILD_DIR", "build")
GOOD_SO = os.path.join(BUILD, "backends", "identity_so", "libcinfer_identity_so.so")
BAD_SO = os.path.join(BUILD, "tests", "backends", "identity_badabi", "libcinfer_identity_badabi.so")


def model(repo, name, backend, dtype, max_batch=8):
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: {max_batch}\n'
                f'input [ {{ name: "INPUT0" data_type: {dtype} dims: [ -1 ] }} ]\n'
                f'output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ -1 ] }} ]\n'
                'dynamic_batching { }\n')


@pytest.fixture
def dirs():
    assert os.path.exists(GOOD_SO), GOOD_SO
    assert os.path.exists(BAD_SO), BAD_SO
    root = tempfile.mkdtemp(prefix="cinfer-abi-")
    repo, bdir = os.path.join(root, "repo"), os.path.join(root, "backends")
    os.makedirs(repo)
    for so in (GOOD_SO, BAD_SO):  # the Triton layout: DIR/<name>/libcinfer_<name>.so
        sub = os.path.join(bdir, os.path.basename(os.path.dirname(so)))
        os.makedirs(sub)
        shutil.copy(so, sub)
    model(repo, "so_fp32", "identity_so", "TYPE_FP32")
    model(repo, "so_bytes", "identity_so", "TYPE_STRING")
    model(repo, "builtin", "identity", "TYPE_INT64")
    model(repo, "bad_major", "identity_badabi", "TYPE_FP32")
    model(repo, "missing", "nosuch", "TYPE_FP32")
    yield repo, bdir
    shutil.rmtree(root)


def index(c):
    return {e["name"]: e for e in c.get_model_repository_index()}


def test_shared_object_backend_serves_and_wrong_major_fails_alone(dirs):
    repo, bdir = dirs
    with Server(repo, ["--backend-directory", bdir, "--strict-readiness", "false"]) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        idx = index(c)
        assert idx["so_fp32"]["state"] == "READY"
        assert idx["so_bytes"]["state"] == "READY"
        assert idx["builtin"]["state"] == "READY"
        bad = idx["bad_major"]
        assert bad["state"] == "UNAVAILABLE"
        assert "identity_badabi/libcinfer_identity_badabi.so" in bad["reason"], bad
        assert f"built for backend ABI {MAJOR - 1}.{MINOR}; this server has {MAJOR}.{MINOR}" in bad["reason"], bad
        missing = idx["missing"]
        assert missing["state"] == "UNAVAILABLE"
        assert os.path.join(bdir, "nosuch", "libcinfer_nosuch.so") in missing["reason"], missing

        # real inference through the shared object, batched by the core
        x = np.arange(12, dtype=np.float32).reshape(3, 4) * 1.5 - 2
        inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        r = c.infer("so_fp32", [inp])
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
        assert r.get_response()["model_name"] == "so_fp32"

        t = np.array([[b"ab", b"", b"\x00\xffz"]], dtype=np.object_)
        inp = httpclient.InferInput("INPUT0", list(t.shape), "BYTES")
        inp.set_data_from_numpy(t)
        out = c.infer("so_bytes", [inp]).as_numpy("OUTPUT0")
        assert out.tolist() == t.tolist()

        # the other models keep serving; the failed one answers a clear error
        y = np.array([[5, -6]], dtype=np.int64)
        inp = httpclient.InferInput("INPUT0", [1, 2], "INT64")
        inp.set_data_from_numpy(y)
        np.testing.assert_array_equal(c.infer("builtin", [inp]).as_numpy("OUTPUT0"), y)
        inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
        inp.set_data_from_numpy(np.zeros((1, 2), np.float32))
        with pytest.raises(Exception) as e:
            c.infer("bad_major", [inp])
        assert "bad_major" in str(e.value)
    assert any("loaded backend 'identity_so'" in l for l in s.log)


def test_without_backend_directory_the_model_fails_naming_the_option(dirs):
    repo, _ = dirs
    with Server(repo, ["--strict-readiness", "false"]) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        e = index(c)["so_fp32"]
        assert e["state"] == "UNAVAILABLE"
        assert "unknown backend 'identity_so'" in e["reason"]
        assert "--backend-directory" in e["reason"]
        assert index(c)["builtin"]["state"] == "READY"


def test_backend_directory_must_exist(dirs):
    repo, _ = dirs
    p = subprocess.run([BIN, "serve", "--model-repository", repo, "--backend-directory",
                        "/nonexistent/cinfer-backends", "--http-port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "backend directory '/nonexistent/cinfer-backends' is not a readable folder" in p.stdout + p.stderr


def onnx_two_outputs(path):
    """A batchable model X[N,3] -> NEG = -X, ABS = |X|, written with the onnx package."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])
    neg = helper.make_tensor_value_info("NEG", TensorProto.FLOAT, ["N", 3])
    ab = helper.make_tensor_value_info("ABS", TensorProto.FLOAT, ["N", 3])
    g = helper.make_graph([helper.make_node("Neg", ["X"], ["NEG"]),
                           helper.make_node("Abs", ["X"], ["ABS"])], "two", [x], [neg, ab])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)


def test_onnx_autocomplete_goes_through_the_setters():
    """Auto-complete (ONNX) returns its changes through cinfer_autocomplete_*: with no
    config at all it sets max_batch_size and every input and output; with the inputs
    listed and no outputs it adds every output (not only the first)."""
    root = tempfile.mkdtemp(prefix="cinfer-abi-ac-")
    try:
        for name, cfg in (("bare", None),
                          ("inputs_only", 'platform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
                           'input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')):
            os.makedirs(os.path.join(root, name, "1"))
            onnx_two_outputs(os.path.join(root, name, "1", "model.onnx"))
            if cfg:
                with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
                    f.write(cfg)
        with Server(root) as s:
            s.wait_ready()
            c = httpclient.InferenceServerClient(s.hostport)
            bare = c.get_model_config("bare")
            assert bare["max_batch_size"] == 8
            assert [i["name"] for i in bare["input"]] == ["X"]
            assert [o["name"] for o in bare["output"]] == ["NEG", "ABS"]
            assert [int(d) for d in bare["output"][1]["dims"]] == [3]
            part = c.get_model_config("inputs_only")
            assert part["max_batch_size"] == 4
            assert [o["name"] for o in part["output"]] == ["NEG", "ABS"]
            x = np.array([[1.5, -2, 0], [-0.25, 3, -7]], dtype=np.float32)
            for model in ("bare", "inputs_only"):
                inp = httpclient.InferInput("X", [2, 3], "FP32")
                inp.set_data_from_numpy(x)
                r = c.infer(model, [inp])
                np.testing.assert_array_equal(r.as_numpy("NEG"), -x)
                np.testing.assert_array_equal(r.as_numpy("ABS"), np.abs(x))
    finally:
        shutil.rmtree(root)
