"""KServe v2 over HTTP, driven by tritonclient.http against the real binary."""
import json
import shutil
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from cinfer_server import Server, copy_repo

DTYPES = {
    "bool": np.bool_, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32,
    "uint64": np.uint64, "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "fp16": np.float16, "fp32": np.float32, "fp64": np.float64,
}


@pytest.fixture(scope="module")
def server():
    with Server() as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(server.hostport)
    yield c
    c.close()


def sample(dtype, shape, seed=0, json_safe=False):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        lo, hi = int(info.min), int(info.max)
        if json_safe:  # JSON numbers are doubles in most clients: exact only up to 2**53
            lo, hi = max(lo, -(2**53)), min(hi, 2**53)
        x = rng.integers(lo, hi, shape, dtype=dtype, endpoint=True)
        x.flat[0], x.flat[-1] = lo, hi  # the extremes travel too
        return x
    return (rng.standard_normal(shape) * 100).astype(dtype)


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    md = client.get_server_metadata()
    assert md["name"] == "cinfer"
    assert "binary_tensor_data" in md["extensions"]
    assert "statistics" in md["extensions"]


def test_model_metadata_and_config(client):
    assert client.is_model_ready("identity")
    assert client.is_model_ready("identity", "1")
    assert not client.is_model_ready("identity", "7")
    md = client.get_model_metadata("identity_pair")
    assert md["name"] == "identity_pair"
    assert md["versions"] == ["1"]
    assert [i["name"] for i in md["inputs"]] == ["INPUT0", "INPUT1"]
    assert md["inputs"][1]["datatype"] == "INT32"
    assert md["inputs"][0]["shape"] == [-1, 4]
    cfg = client.get_model_config("identity")
    assert cfg["name"] == "identity"
    assert cfg["max_batch_size"] == 64
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert "dynamic_batching" in cfg
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("no_such_model")


@pytest.mark.parametrize("binary_in", [False, True])
@pytest.mark.parametrize("binary_out", [False, True])
@pytest.mark.parametrize("name", sorted(DTYPES))
def test_infer_every_datatype(client, name, binary_in, binary_out):
    dtype = DTYPES[name]
    x = sample(dtype, (2, 5), seed=len(name), json_safe=not (binary_in and binary_out))
    inp = httpclient.InferInput("INPUT0", list(x.shape), np_to_triton_dtype(np.dtype(dtype)))
    inp.set_data_from_numpy(x, binary_data=binary_in)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out)
    res = client.infer(f"identity_{name}", [inp], outputs=[out], request_id=f"req-{name}")
    y = res.as_numpy("OUTPUT0")
    assert y.dtype == dtype
    assert y.shape == x.shape
    np.testing.assert_array_equal(y, x)
    assert res.get_response()["id"] == f"req-{name}"


BF16_VALUES = [1.0, -2.5, 0.15625, 2.0**100, 0.0]  # exactly representable in bf16


def test_bf16_binary(client):
    # numpy has no bfloat16: tritonclient sends float32 arrays as bf16 bits (the top half).
    exact = np.array([BF16_VALUES], dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", list(exact.shape), "BF16")
    inp.set_data_from_numpy(exact, binary_data=True)
    res = client.infer("identity_bf16", [inp],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    raw = res.get_output("OUTPUT0")
    assert raw["datatype"] == "BF16"
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0").astype(np.float32).reshape(-1), exact.reshape(-1))


def test_bf16_json(server):
    # tritonclient has no JSON path for BF16; the protocol does: numbers in, numbers out.
    body = {"inputs": [{"name": "INPUT0", "datatype": "BF16", "shape": [1, 5], "data": BF16_VALUES}]}
    req = urllib.request.Request(server.url + "/v2/models/identity_bf16/infer",
                                 data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req) as r:
        out = json.load(r)["outputs"][0]
    assert out["datatype"] == "BF16"
    # numbers print with float32 round-trip precision (%.9g): compare as float32
    np.testing.assert_array_equal(np.array(out["data"], dtype=np.float32),
                                  np.array(BF16_VALUES, dtype=np.float32))


@pytest.mark.parametrize("binary", [False, True])
def test_bytes_tensors(client, binary):
    x = np.array([[b"hello", b"", "na\u00efve \u2603".encode(), b"tab\tquote\"back\\"]],
                 dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", list(x.shape), "BYTES")
    inp.set_data_from_numpy(x, binary_data=binary)
    res = client.infer("identity_string", [inp],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    y = res.as_numpy("OUTPUT0")
    got = [v if isinstance(v, bytes) else v.encode() for v in y.reshape(-1)]
    assert got == list(x.reshape(-1))


def test_output_selection_and_pair(client):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.arange(8, dtype=np.int32).reshape(2, 4) * -3
    i0 = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    i0.set_data_from_numpy(a)
    i1 = httpclient.InferInput("INPUT1", [2, 4], "INT32")
    i1.set_data_from_numpy(b)
    res = client.infer("identity_pair", [i0, i1],
                       outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert res.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), b)
    res = client.infer("identity_pair", [i0, i1])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), b)


def test_nested_json_data(server):
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 3],
                        "data": [[1, 2, 3], [4, 5, 6]]}],
            "parameters": {"custom": "kept", "n": 3}}
    req = urllib.request.Request(server.url + "/v2/models/identity/infer",
                                 data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req) as r:
        out = json.load(r)
    assert out["outputs"][0]["shape"] == [2, 3]
    assert out["outputs"][0]["data"] == [1, 2, 3, 4, 5, 6]
    assert out["model_version"] == "1"


def test_statistics_count_inferences(client):
    before = client.get_inference_statistics("identity_int16")["model_stats"][0]
    x = np.ones((3, 2), dtype=np.int16)
    inp = httpclient.InferInput("INPUT0", [3, 2], "INT16")
    inp.set_data_from_numpy(x)
    for _ in range(4):
        client.infer("identity_int16", [inp])
    after = client.get_inference_statistics("identity_int16")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 12  # rows, not requests
    assert after["execution_count"] - before["execution_count"] == 4
    s = after["inference_stats"]
    assert s["success"]["count"] - before["inference_stats"]["success"]["count"] == 4
    for k in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert s[k]["count"] >= 4 and s[k]["ns"] > 0
    allstats = client.get_inference_statistics()
    assert any(m["name"] == "identity_int16" for m in allstats["model_stats"])


def test_statistics_snapshots_are_consistent(server):
    """Under load, every statistics snapshot has equal success / queue / compute counts
    (perf_analyzer rejects a window where the compute counts differ)."""
    import threading
    stop = threading.Event()
    errors = []

    def load():
        c = httpclient.InferenceServerClient(server.hostport)
        inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        try:
            while not stop.is_set():
                c.infer("identity", [inp])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    poll = httpclient.InferenceServerClient(server.hostport)
    try:
        seen = set()
        for _ in range(1500):  # the old split-lock code failed within ~300 polls
            s = poll.get_inference_statistics("identity")["model_stats"][0]["inference_stats"]
            counts = {k: s[k]["count"] for k in ("success", "queue", "compute_input",
                                                 "compute_infer", "compute_output")}
            assert len(set(counts.values())) == 1, counts
            seen.add(counts["success"])
    finally:
        stop.set()
        for t in threads:
            t.join()
        poll.close()
    assert not errors, errors
    assert len(seen) > 10  # the counts moved while we looked


def test_metrics_endpoint(server, client):
    x = np.ones((1, 3), dtype=np.float32)
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(x)
    client.infer("identity_fp32", [inp])
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    assert 'cinfer_request_success_total{model="identity_fp32",version="1"}' in text
    assert 'cinfer_request_duration_seconds_bucket{model="identity_fp32",version="1",le="+Inf"}' in text
    assert "cinfer_process_resident_memory_bytes" in text
    line = [l for l in text.splitlines()
            if l.startswith('cinfer_inference_count_total{model="identity_fp32"')][0]
    assert float(line.split()[-1]) >= 1


def test_repository_load_unload_explicit():
    repo = copy_repo(["identity", "identity_fp64"])
    try:
        with Server(repo, ["--model-control-mode", "explicit", "--load-model", "identity"]) as s:
            s.wait_ready()
            c = httpclient.InferenceServerClient(s.hostport)
            index = {m["name"]: m for m in c.get_model_repository_index()}
            assert index["identity"]["state"] == "READY"
            assert index["identity_fp64"]["state"] == "UNAVAILABLE"
            assert not c.is_model_ready("identity_fp64")
            c.load_model("identity_fp64")
            assert c.is_model_ready("identity_fp64")
            x = np.array([[1.5, -2.25]], dtype=np.float64)
            inp = httpclient.InferInput("INPUT0", [1, 2], "FP64")
            inp.set_data_from_numpy(x)
            np.testing.assert_array_equal(c.infer("identity_fp64", [inp]).as_numpy("OUTPUT0"), x)
            c.unload_model("identity_fp64")
            # unload returns when the model is out of the table; it drains in the background
            assert not c.is_model_ready("identity_fp64")
            with pytest.raises(InferenceServerException):
                c.infer("identity_fp64", [inp])
            with pytest.raises(InferenceServerException, match="no such model"):
                c.load_model("not_in_repo")
            c.close()
    finally:
        shutil.rmtree(repo)


@pytest.mark.parametrize("binary", [True, False])
def test_large_tensor(client, binary):
    # Large bodies make the server grow its receive buffer after the request head was
    # parsed: the head (path, headers) must stay valid (regression: 'malformed request path').
    n = (1 << 20) if binary else (1 << 16)
    x = np.arange(n, dtype=np.float32).reshape(1, n)
    inp = httpclient.InferInput("INPUT0", [1, n], "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    res = client.infer("identity", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), x)
