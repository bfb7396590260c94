"""`cinfer bench --grpc` (unary ModelInfer and --streaming ModelStreamInfer, decoupled models
included) and `perf_analyzer -i grpc` against the real server: each tool's request count is
cross-checked against the server's own statistics delta (no timing assertion)."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as tg

from cinfer_server import BIN, Server, copy_repo
from test_perf_analyzer import perf_analyzer_bin, perf_analyzer_env

REPEAT_CONFIG = """name: "repeat_int32"
backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def server():
    backends = os.path.join(os.environ.get("CINFER_BUILD_DIR", "build"), "backends")
    assert os.path.isfile(os.path.join(backends, "repeat", "libcinfer_repeat.so")), backends
    repo = copy_repo(["identity", "identity_string"])
    os.makedirs(os.path.join(repo, "repeat_int32", "1"))
    with open(os.path.join(repo, "repeat_int32", "config.pbtxt"), "w") as f:
        f.write(REPEAT_CONFIG)
    try:
        with Server(repo, ["--backend-directory", backends]) as s:
            s.wait_ready()
            assert s.grpc_port
            s.grpc_url = f"127.0.0.1:{s.grpc_port}"
            yield s
    finally:
        shutil.rmtree(repo)


def successes(server, model):
    """The server's cumulative success count for model (KServe HTTP statistics)."""
    with urllib.request.urlopen(f"{server.url}/v2/models/{model}/stats", timeout=30) as r:
        stats = json.loads(r.read())["model_stats"]
    return sum(m["inference_stats"]["success"]["count"] for m in stats)


def bench(server, *args, timeout=300):
    out = tempfile.mktemp(suffix=".json")
    cmd = [BIN, "bench", "--url", f"http://{server.grpc_url}", "--grpc", "--json", out, "--quiet",
           *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    report = None
    if os.path.exists(out):
        with open(out) as f:
            report = json.load(f)
        os.unlink(out)
    return r, report


def unharmed(server):
    c = tg.InferenceServerClient(server.grpc_url)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    i = tg.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    assert np.array_equal(c.infer("identity", [i]).as_numpy("OUTPUT0"), x)
    c.close()


@pytest.mark.parametrize("mode", [[], ["--streaming"], ["--streams-per-connection", "3"],
                                  ["--streaming", "--streams-per-connection", "2"]],
                         ids=["unary", "streaming", "shared-connections", "streaming-shared"])
def test_bench_grpc_counts_match_server_stats(server, mode):
    before = successes(server, "identity")
    r, rep = bench(server, "--model", "identity", "--shape", "INPUT0:1,16", "--requests", "400",
                   "--concurrency", "1,5", *mode)
    assert r.returncode == 0, r.stdout + r.stderr
    assert rep["target"] == ("kserve-grpc-stream" if "--streaming" in mode else "kserve-grpc")
    assert [lv["concurrency"] for lv in rep["levels"]] == [1, 5]
    for lv in rep["levels"]:
        assert lv["requests"] == 400 and lv["errors"] == 0, lv
        # the tool's own ModelStatistics reading around each level
        assert lv["server"]["requests"] == 400, lv
        assert lv["latency"]["count"] == 400
        if "--streaming" in mode:
            assert lv["responses"] == 400  # a plain model: one response per request
    assert successes(server, "identity") - before == 800


def test_bench_grpc_bytes_and_input_data(server):
    data = tempfile.mktemp(suffix=".json")
    with open(data, "w") as f:
        json.dump({"data": [{"INPUT0": {"content": ["ab", "cde"], "shape": [1, 2]}}]}, f)
    before = successes(server, "identity_string")
    r, rep = bench(server, "--model", "identity_string", "--input-data", data, "--requests", "50")
    os.unlink(data)
    assert r.returncode == 0, r.stdout + r.stderr
    assert rep["levels"][0]["requests"] == 50 and rep["levels"][0]["errors"] == 0
    assert successes(server, "identity_string") - before == 50


def test_bench_grpc_streaming_decoupled_model(server):
    """repeat_int32 answers one response per element of IN, then a FINAL-only marker: a
    request is done at that marker, and every response before it is counted."""
    data = tempfile.mktemp(suffix=".json")
    with open(data, "w") as f:
        json.dump({"data": [{"IN": {"content": [3, 1, 4], "shape": [3]}}]}, f)
    before = successes(server, "repeat_int32")
    r, rep = bench(server, "--streaming", "--model", "repeat_int32", "--input-data", data,
                   "--requests", "300", "--concurrency", "1,4")
    os.unlink(data)
    assert r.returncode == 0, r.stdout + r.stderr
    for lv in rep["levels"]:
        assert lv["requests"] == 300 and lv["errors"] == 0, lv
        assert lv["responses"] == 900, lv
        assert lv["first_response"]["count"] == 300
        assert lv["server"]["requests"] == 300
    assert successes(server, "repeat_int32") - before == 600
    assert "gRPC streaming: a token is one streamed response" in r.stdout


def test_bench_grpc_stream_errors_are_counted_and_named(server):
    data = tempfile.mktemp(suffix=".json")
    with open(data, "w") as f:  # the repeat backend fails at a negative element, mid-stream
        json.dump({"data": [{"IN": {"content": [3, -1, 4], "shape": [3]}}]}, f)
    r, rep = bench(server, "--streaming", "--model", "repeat_int32", "--input-data", data,
                   "--requests", "20")
    os.unlink(data)
    # the reason is in the error line of the table (stdout), and on stderr too when a whole
    # window failed before the run ended
    assert r.returncode == 1, r.stdout + r.stderr
    assert "stream error: repeat: element 1 is negative" in r.stdout + r.stderr, r.stdout + r.stderr
    unharmed(server)


def test_bench_grpc_unary_on_decoupled_model_reports_the_status(server):
    r, rep = bench(server, "--model", "repeat_int32", "--shape", "IN:2", "--requests", "5")
    assert r.returncode == 1
    out = r.stdout + r.stderr
    assert "gRPC UNIMPLEMENTED" in out and "ModelStreamInfer" in out, out
    assert rep["levels"][0]["errors_by_kind"]["http"] == 5


def test_bench_grpc_setup_errors(server):
    r, _ = bench(server, "--model", "nosuch", "--requests", "5")
    assert r.returncode == 1 and "NOT_FOUND" in r.stderr and "nosuch" in r.stderr, r.stderr
    # the HTTP port is not a gRPC port: said so, nothing hangs
    cmd = [BIN, "bench", "--url", server.url, "--grpc", "--model", "identity", "--requests", "5"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "gRPC port" in r.stderr, r.stderr
    for bad, msg in [(["--streaming"], "--streaming applies to --grpc"),
                     (["--grpc", "--binary"], "gRPC always sends raw tensors"),
                     (["--streams-per-connection", "2"], "applies to --grpc")]:
        cmd = [BIN, "bench", "--url", f"http://{server.grpc_url}", "--model", "identity", *bad]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and msg in r.stderr, (bad, r.stderr)
    cmd = [BIN, "bench", "--url", f"http://{server.grpc_url}", "--grpc", "--http-get", "/x"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--grpc applies to KServe targets" in r.stderr, r.stderr
    unharmed(server)


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_perf_analyzer_grpc_counts_match_server_stats(server, streaming):
    pa = perf_analyzer_bin()
    assert pa, "perf_analyzer is not installed in the venv (scripts/setup.sh installs it)"
    before = successes(server, "identity")
    cmd = [pa, "-m", "identity", "-u", server.grpc_url, "-i", "grpc", "--shape", "INPUT0:16",
           "--concurrency-range", "4", "--request-count", "500"] + (["--streaming"] if streaming else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=perf_analyzer_env())
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert re.search(r"Request count: 500\b", out), out
    assert successes(server, "identity") - before == 500, out


@pytest.mark.parametrize("mode", [[], ["--streaming"]], ids=["unary", "streaming"])
def test_bench_grpc_open_loop_counts_match_server_stats(server, mode):
    before = successes(server, "identity")
    r, rep = bench(server, "--model", "identity", "--shape", "INPUT0:1,16", "--rate", "500",
                   "--requests", "300", "--poisson", *mode)
    assert r.returncode == 0, r.stdout + r.stderr
    lv = rep["levels"][0]
    assert lv["loop"] == "open" and lv["requests"] == 300 and lv["errors"] == 0, lv
    assert successes(server, "identity") - before == 300


@pytest.mark.parametrize("mode", [[], ["--streaming"]], ids=["unary", "streaming"])
def test_bench_grpc_system_shared_memory(server, mode):
    """--shared-memory system over gRPC: regions registered with SystemSharedMemoryRegister,
    tensors named by parameters (an output region too small is the server's error, so the
    outputs really go there), every region unregistered afterwards."""
    before = successes(server, "identity")
    r, rep = bench(server, "--model", "identity", "--shape", "INPUT0:1,16", "--requests", "200",
                   "--shared-memory", "system", *mode)
    assert r.returncode == 0, r.stdout + r.stderr
    assert rep["levels"][0]["requests"] == 200 and rep["levels"][0]["errors"] == 0
    assert successes(server, "identity") - before == 200
    with urllib.request.urlopen(f"{server.url}/v2/systemsharedmemory/status", timeout=30) as resp:
        assert json.loads(resp.read()) == []
    r, _ = bench(server, "--model", "identity", "--shape", "INPUT0:1,16", "--requests", "3",
                 "--shared-memory", "system", "--output-shared-memory-size", "8", *mode)
    assert r.returncode == 1
    assert "should be at least 64 bytes to hold the results" in r.stdout + r.stderr, r.stdout + r.stderr


def test_bench_grpc_header_is_sent_as_metadata():
    """--header 'Name: value' reaches a gRPC server as call metadata (lower-cased name):
    with Triton's --grpc-restricted-protocol the calls pass only with it."""
    with Server(copy_repo(["identity"]), ["--grpc-restricted-protocol", "inference:infer-key=abc"]) as s:
        s.wait_ready()
        s.grpc_url = f"127.0.0.1:{s.grpc_port}"
        r, rep = bench(s, "--model", "identity", "--shape", "INPUT0:1,4", "--requests", "20",
                       "--header", "Infer-Key: abc")
        assert r.returncode == 0, r.stdout + r.stderr
        assert rep["levels"][0]["requests"] == 20
        r, rep = bench(s, "--model", "identity", "--shape", "INPUT0:1,4", "--requests", "3")
        assert r.returncode == 1
        assert "PERMISSION_DENIED" in r.stdout + r.stderr and "'inference'" in r.stdout + r.stderr
