"""The six real vision models served through the ONNX engine: every test set of
../shared/models/vision answered by `cinfer serve` (tritonclient, binary tensors) matches the
reference outputs at rtol 1e-4 / atol 1e-5, alone and when the dynamic batcher groups
concurrent requests."""
import concurrent.futures as cf
import glob
import json
import os
import re
import tempfile
import urllib.request

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto, helper, numpy_helper

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
    repo = copy_repo(MODELS)
    # The batching test's models wait 100 ms (not the examples' 1-2 ms) for more requests, so
    # that its concurrent requests meet in one batch however the machine schedules them
    # (ssrnet_age runs in 0.5 ms: with the examples' 1-2 ms, 16 requests could all run alone).
    for m in ("ssrnet_age", "retinaface_mnet25_v2"):
        cfg = os.path.join(repo, m, "config.pbtxt")
        text, k = re.subn(r"max_queue_delay_microseconds: \d+", "max_queue_delay_microseconds: 100000",
                          open(cfg).read())
        assert k == 1, cfg
        with open(cfg, "w") as f:
            f.write(text)
    with Server(repo) as s:
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


# ---- models with many inputs and outputs (issue 15) ---------------------------------------
# Built at test time with the onnx package: inputs x0..x{n_in-1} FP32 [N, 2], outputs
# y_j = x_{j % n_in} + (j + 1), so each output's values tell it apart. 70 is past every fixed
# array the serving path used to have (64 outputs in the backend and the frontend, 64 inputs
# in batch assembly); 4097 is one past CINFER_MAX_OUTPUTS.

def wide_model(n_in, n_out):
    xs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["N", 2]) for i in range(n_in)]
    ys = [helper.make_tensor_value_info(f"y{j}", TensorProto.FLOAT, ["N", 2]) for j in range(n_out)]
    cs = [numpy_helper.from_array(np.array([j + 1], np.float32), f"c{j}") for j in range(n_out)]
    nodes = [helper.make_node("Add", [f"x{j % n_in}", f"c{j}"], [f"y{j}"]) for j in range(n_out)]
    g = helper.make_graph(nodes, "wide", xs, ys, initializer=cs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def wide_x(n_in, rows):
    return [np.array([[i * 100 + r * 10 + k for k in range(2)] for r in range(rows)], np.float32)
            for i in range(n_in)]


@pytest.fixture(scope="module")
def wide_server():
    repo = tempfile.mkdtemp(prefix="cinfer-wide-")
    for name, n_in, n_out in [("wide_out", 1, 70), ("wide_in", 70, 70), ("too_wide", 1, 4097)]:
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write('platform: "onnxruntime_onnx"\n')  # inputs, outputs, batching: auto-complete
        onnx.save(wide_model(n_in, n_out), os.path.join(repo, name, "1", "model.onnx"))
    # 70 versions, all served (the metadata listed at most 64)
    os.makedirs(os.path.join(repo, "versions70"))
    with open(os.path.join(repo, "versions70", "config.pbtxt"), "w") as f:
        f.write('platform: "onnxruntime_onnx"\nversion_policy: { all { } }\n')
    small = wide_model(1, 1)
    for v in range(1, 71):
        os.makedirs(os.path.join(repo, "versions70", str(v)))
        onnx.save(small, os.path.join(repo, "versions70", str(v), "model.onnx"))
    with Server(repo) as s:
        # not s.wait_ready(): the server is not ready while too_wide is UNAVAILABLE (as
        # Triton); it listens after the startup loads, so the two good models are READY now
        for name in ("wide_out", "wide_in", "versions70"):
            with urllib.request.urlopen(f"{s.url}/v2/models/{name}/ready", timeout=30) as r:
                assert r.status == 200, name
        yield s


def infer_wide(server, model, n_in, n_out, rows, binary):
    c = httpclient.InferenceServerClient(server.hostport)
    xs = wide_x(n_in, rows)
    ins = []
    for i, x in enumerate(xs):
        inp = httpclient.InferInput(f"x{i}", list(x.shape), "FP32")
        inp.set_data_from_numpy(x, binary_data=binary(i))
        ins.append(inp)
    outs = [httpclient.InferRequestedOutput(f"y{j}", binary_data=binary(j)) for j in range(n_out)]
    res = c.infer(model, ins, outputs=outs)
    got = res.get_response()["outputs"]
    assert len(got) == n_out, f"{len(got)} outputs of {n_out}"
    assert sorted(o["name"] for o in got) == sorted(f"y{j}" for j in range(n_out))
    for o in got:  # binary as asked, for every output (the flags were an array of 64)
        j = int(o["name"][1:])
        assert ("data" not in o) == binary(j), o["name"]
    for j in range(n_out):
        np.testing.assert_array_equal(res.as_numpy(f"y{j}"), xs[j % n_in] + (j + 1), err_msg=f"y{j}")
    c.close()


@pytest.mark.parametrize("rows", [1, 3])
def test_70_outputs(wide_server, rows):
    infer_wide(wide_server, "wide_out", 1, 70, rows, lambda j: True)
    infer_wide(wide_server, "wide_out", 1, 70, rows, lambda j: j % 2 == 1)  # mixed JSON / binary


@pytest.mark.parametrize("rows", [1, 3])
def test_70_inputs(wide_server, rows):
    infer_wide(wide_server, "wide_in", 70, 70, rows, lambda j: True)
    infer_wide(wide_server, "wide_in", 70, 70, rows, lambda j: j >= 64)


def test_70_outputs_concurrent_batched(wide_server):
    """Requests grouped by the batcher keep every output (batch assembly of 70 inputs)."""
    with cf.ThreadPoolExecutor(4) as ex:
        list(ex.map(lambda _: infer_wide(wide_server, "wide_in", 70, 70, 1, lambda j: True), range(8)))


def test_model_over_the_output_limit_is_unavailable(wide_server):
    req = urllib.request.Request(wide_server.url + "/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:
        index = {e["name"]: e for e in json.load(r)}
    assert index["too_wide"]["state"] == "UNAVAILABLE"
    assert "model has 4097 outputs; the limit is CINFER_MAX_OUTPUTS = 4096" in index["too_wide"]["reason"]
    assert index["wide_in"]["state"] == "READY" and index["wide_out"]["state"] == "READY"


def test_metadata_lists_all_70_versions(wide_server):
    with urllib.request.urlopen(wide_server.url + "/v2/models/versions70", timeout=30) as r:
        md = json.load(r)
    assert md["versions"] == [str(v) for v in range(70, 0, -1)]


def test_cinfer_run_70_inputs_and_outputs(tmp_path):
    """`cinfer run` compares all 70 outputs of a 70-input model (it refused more than 64),
    with more than 16 --input overrides (it refused a 17th)."""
    import subprocess
    from cinfer_server import BIN
    model = tmp_path / "model.onnx"
    onnx.save(wide_model(70, 70), str(model))
    data = tmp_path / "data"
    data.mkdir()
    xs = wide_x(70, 2)
    for i, x in enumerate(xs):
        with open(data / f"input_{i}.pb", "wb") as f:
            f.write(numpy_helper.from_array(x, f"x{i}").SerializeToString())
    for j in range(70):
        with open(data / f"output_{j}.pb", "wb") as f:
            f.write(numpy_helper.from_array(xs[j % 70] + (j + 1), f"y{j}").SerializeToString())
    r = subprocess.run([BIN, "run", "--model", str(model), "--test-data-dir", str(data)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sum(" PASS" in line for line in r.stdout.splitlines() if "output y" in line) == 70, r.stdout
    # 20 inputs given with --input (x50..x69 doubled): those outputs no longer match
    args = []
    for i in range(50, 70):
        p = tmp_path / f"over_{i}.npy"
        np.save(p, xs[i] * 2)
        args += ["--input", f"x{i}={p}"]
    r = subprocess.run([BIN, "run", "--model", str(model), "--test-data-dir", str(data)] + args,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    fails = sorted(int(line.split()[1][1:]) for line in r.stdout.splitlines()
                   if line.strip().startswith("output y") and "FAIL" in line)
    assert fails == list(range(50, 70)), r.stdout


def test_cinfer_run_min_time():
    """`cinfer run --repeat N --min-time S` times at least N runs and goes on until the timed
    runs took S seconds (the window bench_vs_ort.py gives both engines); a bad value, or
    --min-time without --repeat, is a usage error naming the option."""
    import subprocess
    from cinfer_server import BIN
    m = os.path.join(VISION, "ssrnet_age")
    base = [BIN, "run", "--model", os.path.join(m, "model.onnx"), "--test-data-dir", os.path.join(m, "test_data_set_0")]
    r = subprocess.run(base + ["--repeat", "3", "--min-time", "0.25"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    got = re.search(r"latency over (\d+) runs .* throughput ([0-9.]+) inferences/s", r.stdout)
    assert got, r.stdout
    runs, per_s = int(got.group(1)), float(got.group(2))
    assert runs > 3 and runs / per_s >= 0.249, r.stdout  # the timed runs span the window
    r = subprocess.run(base + ["--repeat", "3"], capture_output=True, text=True, timeout=300)
    assert re.search(r"latency over 3 runs", r.stdout), r.stdout
    for bad, msg in ((["--repeat", "3", "--min-time", "x"], "--min-time 'x'"),
                     (["--repeat", "3", "--min-time", "-1"], "--min-time '-1'"),
                     (["--repeat", "3", "--min-time", "inf"], "--min-time 'inf'"),
                     (["--min-time", "1"], "--min-time needs --repeat")):
        r = subprocess.run(base + bad, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr, (bad, r.stdout, r.stderr)
