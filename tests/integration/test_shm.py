"""Triton's system shared-memory extension against the real binary, with
tritonclient.utils.shared_memory (POSIX objects) and tritonclient.http, plus curl for the
raw endpoints: register / status / unregister, inputs read from and outputs written to
regions, Triton's checks and texts, a region unregistered while a request uses it, and
CUDA shared memory refused with a clear error."""
import json
import os
import subprocess
import threading
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo

SLOW_SIM = """
name: "slow_sim"
backend: "sim"
max_batch_size: 8
input [ { name: "images" data_type: TYPE_UINT8 dims: [ 16 ] } ]
output [ { name: "boxes" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "base_us" value: { string_value: "1500000" } }
parameters { key: "per_item_us" value: { string_value: "0" } }
parameters { key: "device_concurrency" value: { string_value: "1" } }
"""


@pytest.fixture(scope="module")
def server():
    repo = copy_repo(["identity", "identity_string", "identity_int64"])
    os.makedirs(os.path.join(repo, "slow_sim", "1"))
    with open(os.path.join(repo, "slow_sim", "config.pbtxt"), "w") as f:
        f.write(SLOW_SIM)
    with Server(repo, args=["--log-verbose", "1"]) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(server.hostport)
    c.unregister_system_shared_memory()
    yield c
    c.unregister_system_shared_memory()
    c.close()


class Region:
    """A client-side POSIX shared-memory object (tritonclient's helper)."""

    def __init__(self, name, size):
        self.name, self.key, self.size = name, f"/cinfer_t_{name}_{os.getpid()}", size
        self.h = shm.create_shared_memory_region(name, self.key, size)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shm.destroy_shared_memory_region(self.h)


def curl(server, method, path, body=None):
    cmd = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", method, server.url + path]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", body]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    text, code = out.rsplit("\n", 1)
    return int(code), text


def test_register_status_unregister(server, client):
    with Region("a", 1024) as a, Region("b", 64) as b:
        client.register_system_shared_memory("a", a.key, 512, offset=256)
        client.register_system_shared_memory("b", b.key, 64)
        st = {r["name"]: r for r in client.get_system_shared_memory_status()}
        assert st["a"] == {"name": "a", "key": a.key, "offset": 256, "byte_size": 512}
        assert st["b"]["byte_size"] == 64
        one = client.get_system_shared_memory_status(region_name="b")
        assert [r["name"] for r in one] == ["b"]
        client.unregister_system_shared_memory("a")
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["b"]
        client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status() == []


def test_register_errors(server, client):
    with Region("dup", 64) as r:
        client.register_system_shared_memory("dup", r.key, 64)
        with pytest.raises(InferenceServerException, match="shared memory region 'dup' already in manager"):
            client.register_system_shared_memory("dup", r.key, 64)
        with pytest.raises(InferenceServerException, match="invalid args"):
            client.register_system_shared_memory("big", r.key, 65)
        with pytest.raises(InferenceServerException, match="invalid args"):
            client.register_system_shared_memory("past", r.key, 8, offset=60)
    with pytest.raises(InferenceServerException, match="Unable to open shared memory region: '/cinfer_no_such_key'"):
        client.register_system_shared_memory("x", "/cinfer_no_such_key", 8)
    code, text = curl(server, "POST", "/v2/systemsharedmemory/region/x/register", '{"key":"/k"}')
    assert code == 400 and "no 'byte_size' field" in text
    code, text = curl(server, "POST", "/v2/systemsharedmemory/region/x/register", '{"byte_size":4}')
    assert code == 400 and "no 'key' field" in text
    code, text = curl(server, "POST", "/v2/systemsharedmemory/region/x/register", '{"key":"///","byte_size":4}')
    assert code == 400 and "invalid shm key" in text
    code, text = curl(server, "POST", "/v2/systemsharedmemory/region/x/register", "not json")
    assert code == 400
    code, text = curl(server, "GET", "/v2/systemsharedmemory/region/nope/status")
    assert code == 404 and "Unable to find system shared memory region: 'nope'" in text
    code, _ = curl(server, "GET", "/v2/systemsharedmemory/region/x/register")
    assert code == 405
    # nothing registered by the failures, and the server still serves
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["dup"]
    assert client.is_server_live()


def test_infer_inputs_and_outputs_in_regions(server, client):
    x = np.arange(1024, dtype=np.float32).reshape(1, 1024) * 0.5
    n = x.nbytes
    with Region("in", n + 128) as rin, Region("out", n + 64) as rout:
        shm.set_shared_memory_region(rin.h, [x], offset=128)
        client.register_system_shared_memory("in", rin.key, n + 128)
        client.register_system_shared_memory("out", rout.key, n + 64)
        inp = httpclient.InferInput("INPUT0", [1, 1024], "FP32")
        inp.set_shared_memory("in", n, offset=128)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("out", n, offset=64)
        r = client.infer("identity", [inp], outputs=[out])
        o = r.get_output("OUTPUT0")
        assert o["shape"] == [1, 1024] and o["datatype"] == "FP32"
        # the data is in the region, not in the body (as Triton answers)
        assert "data" not in o and "binary_data_size" not in o.get("parameters", {})
        y = shm.get_contents_as_numpy(rout.h, np.float32, [1, 1024], offset=64)
        np.testing.assert_array_equal(x, y)
        # one input from a region, the output back as binary over HTTP
        r = client.infer("identity", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)])
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)


def test_bytes_input_in_region(server, client):
    from tritonclient.utils import serialize_byte_tensor
    s = np.array([b"hello", b"", b"shared \x00 memory"], dtype=np.object_).reshape(1, 3)
    ser = serialize_byte_tensor(s)
    n = len(ser.item())
    with Region("s", n) as r:
        shm.set_shared_memory_region(r.h, [ser])
        client.register_system_shared_memory("s", r.key, n)
        inp = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
        inp.set_shared_memory("s", n)
        res = client.infer("identity_string", [inp])
        assert res.as_numpy("OUTPUT0").tolist() == s.tolist()


def test_infer_region_errors(server, client):
    with Region("r", 64) as r:
        client.register_system_shared_memory("r", r.key, 64)
        inp = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        inp.set_shared_memory("missing", 64)
        with pytest.raises(InferenceServerException, match="Unable to find shared memory region: 'missing'") as e:
            client.infer("identity", [inp])
        assert str(e.value.status()) == "404"
        inp.set_shared_memory("r", 64, offset=64)
        with pytest.raises(InferenceServerException, match="Invalid offset for shared memory region: 'r'"):
            client.infer("identity", [inp])
        inp.set_shared_memory("r", 64, offset=8)
        with pytest.raises(InferenceServerException, match=r"Invalid offset \+ byte size for shared memory region: 'r'"):
            client.infer("identity", [inp])
        inp = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        inp.set_shared_memory("r", 32)
        with pytest.raises(InferenceServerException, match=r"input byte size mismatch for input 'INPUT0' for model 'identity'. Expected 64, got 32"):
            client.infer("identity", [inp])
        # output region too small for the result: Triton's text
        inp = httpclient.InferInput("INPUT0", [1, 16], "FP32")
        inp.set_shared_memory("r", 64)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("r", 16)
        with pytest.raises(InferenceServerException,
                           match=r"shared memory size specified with the request for output 'OUTPUT0' \(16 bytes\) "
                                 r"should be at least 64 bytes to hold the results"):
            client.infer("identity", [inp], outputs=[out])
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                       "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 64}}],
                           "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "r",
                                                                          "binary_data": True}}]})
        code, text = curl(server, "POST", "/v2/models/identity/infer", body)
        assert code == 400 and "can't set both 'shared_memory_region' and 'binary_data'" in text
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16,
                                       "parameters": {"shared_memory_region": "r"}}]})
        code, text = curl(server, "POST", "/v2/models/identity/infer", body)
        assert code == 400 and "But set 'data' 'shared_memory_region'" in text
        # the region is still registered and works
        out.set_shared_memory("r", 64)
        shm.set_shared_memory_region(r.h, [np.full((1, 16), 3, np.float32)])
        client.infer("identity", [inp], outputs=[out])
        np.testing.assert_array_equal(shm.get_contents_as_numpy(r.h, np.float32, [1, 16]), 3)


def test_unregister_while_in_use(server, client):
    """A request that slow_sim executes for 1.5 s holds its regions from the moment it is
    decoded (the server logs "using shared-memory" then, as Triton does at verbose 1);
    unregistering them succeeds at once and, as Triton (L0_shared_memory
    TestSharedMemoryUnregister), the names stay listed until the request completes, writing
    its output region; then they go."""
    with Region("qin", 16) as rin, Region("qout", 16) as rout:
        shm.set_shared_memory_region(rin.h, [np.arange(16, dtype=np.uint8).reshape(1, 16)])
        client.register_system_shared_memory("qin", rin.key, 16)
        client.register_system_shared_memory("qout", rout.key, 16)
        inp = httpclient.InferInput("images", [1, 16], "UINT8")
        inp.set_shared_memory("qin", 16)
        out = httpclient.InferRequestedOutput("boxes")
        out.set_shared_memory("qout", 16)
        result = {}

        def run():
            c = httpclient.InferenceServerClient(server.hostport, network_timeout=60)
            try:
                result["r"] = c.infer("slow_sim", [inp], outputs=[out])
            except Exception as e:  # noqa: BLE001 (asserted below)
                result["r"] = e
            c.close()

        def decoded():
            return any("using shared-memory for input 'images' of model 'slow_sim'" in l for l in server.log)

        assert not decoded()
        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 30
        while not decoded() and time.monotonic() < deadline and "r" not in result:
            time.sleep(0.005)
        assert decoded() and "r" not in result, f"the request was never seen in flight: {result}"
        client.unregister_system_shared_memory()
        assert sorted(r["name"] for r in client.get_system_shared_memory_status()) == ["qin", "qout"]
        t.join(60)
        assert not isinstance(result["r"], Exception), result["r"]
        # the request's last reference goes after its response: wait for it, bounded
        deadline = time.monotonic() + 30
        while client.get_system_shared_memory_status() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.get_system_shared_memory_status() == []
        assert result["r"].get_output("boxes")["shape"] == [1, 4]
        # the sim backend writes byte k = (k * 31) & 0xff into its first output
        got = shm.get_contents_as_numpy(rout.h, np.uint8, [16])
        assert got.tolist() == [(k * 31) & 0xFF for k in range(16)]
        # a new request naming the region now fails cleanly, and the name can be reused
        with pytest.raises(InferenceServerException, match="Unable to find shared memory region: 'qin'"):
            client.infer("slow_sim", [inp])
        client.register_system_shared_memory("qin", rin.key, 16)
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["qin"]


def test_cuda_shared_memory_is_refused_clearly(server, client):
    code, text = curl(server, "POST", "/v2/cudasharedmemory/region/g/register",
                      '{"raw_handle":{"b64":"AAAA"},"device_id":0,"byte_size":16}')
    assert code == 400 and "GPUs not supported" in text and "no GPU" in text
    code, text = curl(server, "GET", "/v2/cudasharedmemory/status")
    assert code == 200 and json.loads(text) == []
    assert client.get_cuda_shared_memory_status() == []
    code, text = curl(server, "POST", "/v2/cudasharedmemory/unregister")
    assert code == 200


def test_perf_analyzer_shared_memory_system(server, client):
    """perf_analyzer --shared-memory system: it registers its regions, sends every
    request through them and unregisters them at the end."""
    from test_perf_analyzer import perf_analyzer_bin, perf_analyzer_env
    pa = perf_analyzer_bin()
    assert pa, "perf_analyzer is not installed in the venv (scripts/setup.sh installs it)"
    cmd = [pa, "-m", "identity", "-u", server.hostport, "-i", "http", "--shape", "INPUT0:256",
           "--shared-memory", "system", "--output-shared-memory-size", "1024",
           "--concurrency-range", "1:4:3", "--measurement-mode", "count_windows",
           "--measurement-request-count", "100", "--stability-percentage", "10000",
           "--max-trials", "4"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=perf_analyzer_env())
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Concurrency: 1," in out and "Concurrency: 4," in out, out
    assert "error" not in out.lower().replace("error rate", ""), out
    assert client.get_system_shared_memory_status() == []


def test_cinfer_bench_shared_memory_system(server, client):
    """cinfer bench --shared-memory system against the same server: no errors, and its
    regions are unregistered (and unlinked) when it ends."""
    bin_ = os.environ.get("CINFER_BIN", "build/src/cli/cinfer")
    before = set(os.listdir("/dev/shm"))
    r = subprocess.run([bin_, "bench", "--url", server.url, "--model", "identity", "--shape", "INPUT0:1,4096",
                        "--shared-memory", "system", "--output-shared-memory-size", "16384",
                        "--concurrency", "1,4", "--requests", "200", "--warmup-ms", "0", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [l.split() for l in r.stdout.splitlines() if l.startswith("c=")]
    assert rows and all(row[9] == "0" for row in rows[:2]), r.stdout  # errors column
    assert client.get_system_shared_memory_status() == []
    assert not [f for f in set(os.listdir("/dev/shm")) - before if f.startswith("cinfer_bench_")]
    r = subprocess.run([bin_, "bench", "--url", server.url, "--model", "identity", "--shape", "INPUT0:1,4096",
                        "--shared-memory", "system", "--binary"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "exclusive" in r.stderr
