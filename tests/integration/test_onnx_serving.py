"""The six real vision models served through the ONNX engine: every test set of
../shared/models/vision answered by `cinfer serve` (tritonclient, binary tensors) matches the
reference outputs at rtol 1e-4 / atol 1e-5, alone and when the dynamic batcher groups
concurrent requests."""
import concurrent.futures as cf
import glob
import os

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import numpy_helper

from cinfer_server import Server, copy_repo, EXAMPLES

MODELS = ["retinaface_mnet25_v2", "densenet_expression", "ultraface_rfb320", "ssrnet_age",
          "ssrnet_gender", "mobilefacenet_embedding"]
VISION = os.path.realpath(os.path.join(EXAMPLES, "..", "..", "..", "shared", "models", "vision"))


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def data_sets(model):
    sets = sorted(glob.glob(os.path.join(VISION, model, "test_data_set_*")))
    assert sets, f"no test sets for {model} under {VISION}"
    return sets


@pytest.fixture(scope="module")
def server():
    with Server(copy_repo(MODELS)) as s:
        s.wait_ready()
        yield s


def run(client, model, x):
    md = client.get_model_metadata(model)
    inp = httpclient.InferInput(md["inputs"][0]["name"], list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    outs = [httpclient.InferRequestedOutput(o["name"], binary_data=True) for o in md["outputs"]]
    res = client.infer(model, [inp], outputs=outs)
    return [res.as_numpy(o["name"]) for o in md["outputs"]]


@pytest.mark.parametrize("model", MODELS)
def test_reference_outputs(server, model):
    c = httpclient.InferenceServerClient(server.hostport)
    for ts in data_sets(model):
        x = load_pb(os.path.join(ts, "input_0.pb")).astype(np.float32)
        refs = [load_pb(p) for p in sorted(glob.glob(os.path.join(ts, "output_*.pb")))]
        got = run(c, model, x)
        assert len(got) >= len(refs)
        for k, ref in enumerate(refs):
            np.testing.assert_allclose(got[k].reshape(ref.shape), ref, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{model} {os.path.basename(ts)} output {k}")
    c.close()


@pytest.mark.parametrize("model", ["ssrnet_age", "retinaface_mnet25_v2"])
def test_batched_requests_match_reference(server, model):
    sets = data_sets(model)
    cases = []
    for ts in sets:
        x = load_pb(os.path.join(ts, "input_0.pb")).astype(np.float32)
        ref = load_pb(sorted(glob.glob(os.path.join(ts, "output_*.pb")))[0])
        cases.append((x, ref))
    c0 = httpclient.InferenceServerClient(server.hostport)
    before = c0.get_inference_statistics(model)["model_stats"][0]

    def one(i):
        x, ref = cases[i % len(cases)]
        c = httpclient.InferenceServerClient(server.hostport)
        got = run(c, model, x)[0]
        c.close()
        np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-5)
        return True

    n = 16
    with cf.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(one, range(n)))
    after = c0.get_inference_statistics(model)["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == n
    # concurrent requests were batched: fewer executions than requests
    assert after["execution_count"] - before["execution_count"] < n
    c0.close()
