"""Ensembles (platform "ensemble") served by the real binary, through tritonclient HTTP:
a chain and a fan-out/fan-in of identity models, an ONNX step checked against calling the
model directly, concurrent requests batched by a step's dynamic batcher, a failing step
(400 naming the step, the server healthy after), and loads that must fail with their
reason in the repository index (unknown step model, a cycle). Explicit mode: loading an
ensemble loads its step models, unloading a step makes the ensemble unavailable."""
import json
import os
import shutil
import signal
import tempfile
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo


def identity(name, dims, max_batch=8, n=1, extra=""):
    ins = ",".join(f'{{ name: "INPUT{i}" data_type: TYPE_FP32 dims: {dims} }}' for i in range(n))
    outs = ",".join(f'{{ name: "OUTPUT{i}" data_type: TYPE_FP32 dims: {dims} }}' for i in range(n))
    return (f'name: "{name}"\nbackend: "identity"\nmax_batch_size: {max_batch}\n'
            f"input [ {ins} ]\noutput [ {outs} ]\n{extra}")


def step(model, ins, outs):
    im = ", ".join(f'{{ key: "{k}" value: "{v}" }}' for k, v in ins.items())
    om = ", ".join(f'{{ key: "{k}" value: "{v}" }}' for k, v in outs.items())
    return f'{{ model_name: "{model}" model_version: -1 input_map [ {im} ] output_map [ {om} ] }}'


def ensemble(name, inputs, outputs, steps, max_batch=8):
    ins = ",".join(f'{{ name: "{n}" data_type: {t} dims: {d} }}' for n, t, d in inputs)
    outs = ",".join(f'{{ name: "{n}" data_type: {t} dims: {d} }}' for n, t, d in outputs)
    return (f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch}\n'
            f"input [ {ins} ]\noutput [ {outs} ]\n"
            f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n")


def write(repo, name, text):
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(text)


F = "TYPE_FP32"


@pytest.fixture(scope="module")
def repo():
    d = copy_repo(["ssrnet_gender"])
    write(d, "id_a", identity("id_a", "[ -1 ]"))
    write(d, "id_b", identity("id_b", "[ -1 ]"))
    write(d, "id_c", identity("id_c", "[ -1 ]"))
    write(d, "id_pair", identity("id_pair", "[ -1 ]", n=2))
    write(d, "id_four", identity("id_four", "[ 4 ]"))
    # A batcher that holds requests for up to 2 s: concurrent ensemble
    # requests must meet in it.
    write(d, "id_batch", identity("id_batch", "[ -1 ]", extra=(
        "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000000 }\n")))
    write(d, "id_img", identity("id_img", "[ 3, 64, 64 ]"))
    write(d, "chain", ensemble("chain", [("IN", F, "[ -1 ]")], [("OUT", F, "[ -1 ]")], [
        step("id_a", {"INPUT0": "IN"}, {"OUTPUT0": "t1"}),
        step("id_b", {"INPUT0": "t1"}, {"OUTPUT0": "t2"}),
        step("id_c", {"INPUT0": "t2"}, {"OUTPUT0": "OUT"})]))
    write(d, "fan", ensemble("fan", [("IN", F, "[ -1 ]")],
                             [("X", F, "[ -1 ]"), ("Y", F, "[ -1 ]"), ("Z", F, "[ -1 ]")], [
        step("id_pair", {"INPUT0": "tb", "INPUT1": "Z"}, {"OUTPUT0": "X", "OUTPUT1": "Y"}),
        step("id_a", {"INPUT0": "IN"}, {"OUTPUT0": "ta"}),
        step("id_b", {"INPUT0": "ta"}, {"OUTPUT0": "tb"}),
        step("id_c", {"INPUT0": "ta"}, {"OUTPUT0": "Z"})]))
    write(d, "batched", ensemble("batched", [("IN", F, "[ -1 ]")], [("OUT", F, "[ -1 ]")], [
        step("id_a", {"INPUT0": "IN"}, {"OUTPUT0": "t"}),
        step("id_batch", {"INPUT0": "t"}, {"OUTPUT0": "OUT"})]))
    write(d, "bad_shape", ensemble("bad_shape", [("IN", F, "[ -1 ]")], [("OUT", F, "[ 4 ]")], [
        step("id_a", {"INPUT0": "IN"}, {"OUTPUT0": "t"}),
        step("id_four", {"INPUT0": "t"}, {"OUTPUT0": "OUT"})]))
    write(d, "unknown_step", ensemble("unknown_step", [("IN", F, "[ -1 ]")], [("OUT", F, "[ -1 ]")], [
        step("no_such_model", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})]))
    write(d, "cycle", ensemble("cycle", [("IN", F, "[ -1 ]")], [("OUT", F, "[ -1 ]")], [
        step("id_pair", {"INPUT0": "IN", "INPUT1": "v"}, {"OUTPUT0": "OUT", "OUTPUT1": "u"}),
        step("id_a", {"INPUT0": "u"}, {"OUTPUT0": "v"})]))
    yield d
    shutil.rmtree(d)


@pytest.fixture(scope="module")
def server(repo):
    with Server(repo, ["--model-control-mode", "explicit"]) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    return httpclient.InferenceServerClient(server.hostport, concurrency=16)


def fp32(name, x):
    i = httpclient.InferInput(name, list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i


def index_of(client, name):
    return [e for e in client.get_model_repository_index() if e["name"] == name]


def test_chain_loads_its_steps_and_passes_tensors(client):
    assert not client.is_model_ready("id_a")
    client.load_model("chain")  # explicit mode: the step models load first (Triton)
    for m in ("id_a", "id_b", "id_c", "chain"):
        assert client.is_model_ready(m), m
    assert client.get_model_metadata("chain")["platform"] == "ensemble"
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = client.infer("chain", [fp32("IN", x)])
    np.testing.assert_array_equal(r.as_numpy("OUT"), x)
    stats = {s["name"]: s for s in client.get_inference_statistics()["model_stats"]}
    for m in ("chain", "id_a", "id_b", "id_c"):
        assert stats[m]["inference_stats"]["success"]["count"] >= 1, m
    assert stats["chain"]["inference_count"] >= 3


def test_fan_out_fan_in_and_requested_outputs(client):
    client.load_model("fan")
    x = np.array([[1.5, -2, 3]], dtype=np.float32)
    r = client.infer("fan", [fp32("IN", x)])
    for o in ("X", "Y", "Z"):
        np.testing.assert_array_equal(r.as_numpy(o), x)
    r = client.infer("fan", [fp32("IN", x)], outputs=[httpclient.InferRequestedOutput("Y")])
    assert [o["name"] for o in r.get_response()["outputs"]] == ["Y"]
    np.testing.assert_array_equal(r.as_numpy("Y"), x)
    with pytest.raises(InferenceServerException) as e:
        client.infer("fan", [fp32("IN", x)], outputs=[httpclient.InferRequestedOutput("tb")])
    assert "unexpected inference output 'tb'" in str(e.value)


def test_onnx_step_equals_calling_the_model(client, repo):
    client.load_model("ssrnet_gender")
    cfg = client.get_model_config("ssrnet_gender")
    mb = cfg.get("max_batch_size", 0)
    inp = cfg["input"][0]
    outs = [o["name"] for o in cfg["output"]]
    dims = [int(d) for d in inp["dims"]]
    shape = ([1] if mb > 0 else []) + dims
    if mb > 0:  # the identity step batches; a non-batching model gets [1, 3, 64, 64] whole
        pre = identity("pre", "[ 3, 64, 64 ]", max_batch=mb)
    else:
        pre = identity("pre", "[ " + ", ".join(map(str, dims)) + " ]", max_batch=0)
    write(repo, "pre", pre)
    odecl = [(o["name"], o["data_type"], "[ " + ", ".join(map(str, o["dims"])) + " ]") for o in cfg["output"]]
    write(repo, "gender", ensemble(
        "gender", [("image", F, "[ " + ", ".join(map(str, inp["dims"])) + " ]")], odecl, [
            step("pre", {"INPUT0": "image"}, {"OUTPUT0": "pixels"}),
            step("ssrnet_gender", {inp["name"]: "pixels"}, {o: o for o in outs})], max_batch=mb))
    client.load_model("gender")
    rng = np.random.default_rng(7)
    x = rng.random(shape, dtype=np.float32)
    direct = client.infer("ssrnet_gender", [fp32(inp["name"], x)])
    via = client.infer("gender", [fp32("image", x)])
    for o in outs:
        np.testing.assert_array_equal(via.as_numpy(o), direct.as_numpy(o))
        assert np.isfinite(via.as_numpy(o)).all()


def test_concurrent_requests_meet_in_the_step_batcher(client):
    client.load_model("batched")
    before = client.get_inference_statistics("id_batch")["model_stats"][0]
    xs = [np.full((1, 3), i, dtype=np.float32) for i in range(8)]
    pending = [client.async_infer("batched", [fp32("IN", x)]) for x in xs]
    rs = [p.get_result(timeout=60) for p in pending]
    for x, r in zip(xs, rs):
        np.testing.assert_array_equal(r.as_numpy("OUT"), x)
    after = client.get_inference_statistics("id_batch")["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 8
    assert executions < inferences  # the 8 ensemble requests' steps were batched
    ens = client.get_inference_statistics("batched")["model_stats"][0]
    assert ens["inference_stats"]["success"]["count"] >= 8


def test_failing_step_is_named_and_the_server_stays_healthy(server, client):
    client.load_model("bad_shape")
    x = np.zeros((1, 3), dtype=np.float32)
    body = json.dumps({"inputs": [{"name": "IN", "shape": [1, 3], "datatype": "FP32",
                                   "data": [0, 0, 0]}]}).encode()
    req = urllib.request.Request(server.url + "/v2/models/bad_shape/infer", data=body,
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400
    msg = json.loads(e.value.read())["error"]
    assert "in ensemble 'bad_shape', step 1 (model 'id_four')" in msg
    assert "unexpected shape for input 'INPUT0'" in msg
    assert client.is_server_live() and client.is_server_ready()
    r = client.infer("bad_shape", [fp32("IN", np.ones((1, 4), dtype=np.float32))])
    np.testing.assert_array_equal(r.as_numpy("OUT"), np.ones((1, 4), dtype=np.float32))
    st = client.get_inference_statistics("bad_shape")["model_stats"][0]["inference_stats"]
    assert st["fail"]["count"] == 1 and st["success"]["count"] == 1
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as m:
        text = m.read().decode()
    assert 'cinfer_request_success_total{model="bad_shape",version="1"} 1' in text


def test_unknown_step_model_fails_the_load(client):
    with pytest.raises(InferenceServerException) as e:
        client.load_model("unknown_step")
    assert "no_such_model" in str(e.value)
    [entry] = index_of(client, "unknown_step")
    assert entry["state"] == "UNAVAILABLE"
    assert "ensemble 'unknown_step' depends on 'no_such_model'" in entry["reason"]
    assert "no such model in the repository" in entry["reason"]


def test_cycle_fails_the_load(client):
    with pytest.raises(InferenceServerException) as e:
        client.load_model("cycle")
    assert "has a cycle" in str(e.value)
    [entry] = index_of(client, "cycle")
    assert entry["state"] == "UNAVAILABLE" and "has a cycle" in entry["reason"]
    assert "reads 'u' from step 0 ('id_pair')" in entry["reason"]


def test_unloading_a_step_makes_the_ensemble_unavailable(client):
    client.load_model("chain")
    assert client.is_model_ready("chain")
    client.unload_model("id_b")
    assert not client.is_model_ready("chain")
    with pytest.raises(InferenceServerException) as e:
        client.infer("chain", [fp32("IN", np.ones((1, 2), dtype=np.float32))])
    assert "depends on 'id_b'" in str(e.value)
    assert client.is_model_ready("id_a")  # the other steps stay loaded
    client.load_model("chain")  # loads id_b again
    assert client.is_model_ready("id_b") and client.is_model_ready("chain")
    r = client.infer("chain", [fp32("IN", np.ones((1, 2), dtype=np.float32))])
    np.testing.assert_array_equal(r.as_numpy("OUT"), np.ones((1, 2), dtype=np.float32))


def test_sigterm_drain_waits_for_ensemble_requests():
    """A request between steps when SIGTERM comes still completes: the drain counts the
    ensemble request, and its later steps are submitted while draining."""
    d = tempfile.mkdtemp(prefix="cinfer-ens-drain-")
    try:
        write(d, "id_a", identity("id_a", "[ 2 ]"))
        write(d, "slow", 'name: "slow"\nbackend: "sim"\nmax_batch_size: 8\n'
              'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
              'output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
              'parameters { key: "base_us" value: { string_value: "400000" } }\n')
        write(d, "pipe", ensemble("pipe", [("IN", F, "[ 2 ]")], [("OUT", F, "[ 3 ]")], [
            step("id_a", {"INPUT0": "IN"}, {"OUTPUT0": "t"}),
            step("slow", {"x": "t"}, {"y": "OUT"})]))
        s = Server(d).start()
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        pending = c.async_infer("pipe", [fp32("IN", np.ones((1, 2), dtype=np.float32))])
        # Bounded wait on a condition: the first step has answered, the slow one runs.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = c.get_inference_statistics("id_a")["model_stats"][0]
            if st["inference_stats"]["success"]["count"] == 1:
                break
            time.sleep(0.01)
        assert st["inference_stats"]["success"]["count"] == 1
        s.proc.send_signal(signal.SIGTERM)
        r = pending.get_result(timeout=60)
        assert r.as_numpy("OUT").shape == (1, 3)
        assert s.stop() == 0
        assert any("draining" in l for l in s.log)
    finally:
        shutil.rmtree(d)
