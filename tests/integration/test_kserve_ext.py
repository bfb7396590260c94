"""Triton's HTTP extensions and protocol details against the real binary, with
tritonclient.http, curl and raw sockets: raw binary requests, classification with labels,
gzip/deflate bodies both ways, exact 64-bit integers in JSON, nesting to depth 100, the
chunk-count limit, binary_data_output precedence, and Triton's error texts and limits."""
import gzip
import json
import os
import socket
import struct
import subprocess
import zlib

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo

LABELS = ["cat", "dog", "bird", "fish"]
CLASSIFIER = """
name: "classifier"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" } ]
"""
NOBATCH = """
name: "nobatch_int32"
backend: "identity"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 2, -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2, -1 ] } ]
"""


def add_model(repo, name, config, files=()):
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)
    for fname, text in files:
        with open(os.path.join(repo, name, fname), "w") as f:
            f.write(text)


@pytest.fixture(scope="module")
def server():
    repo = copy_repo(["identity", "identity_string", "identity_int64", "identity_uint64", "identity_pair"])
    add_model(repo, "classifier", CLASSIFIER, [("labels.txt", "\n".join(LABELS) + "\n")])
    add_model(repo, "nobatch_int32", NOBATCH)
    with Server(repo, args=["--http-max-input-size", str(1 << 20), "--http-max-chunks", "64"]) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    c = httpclient.InferenceServerClient(server.hostport)
    yield c
    c.close()


def post(server, path, body, headers=()):
    """curl POST; returns (status, headers text, body bytes)."""
    cmd = ["curl", "-s", "-D", "-", "-o", "/dev/stderr", "-X", "POST", server.url + path,
           "--data-binary", "@-", "-H", "Expect:"]
    for h in headers:
        cmd += ["-H", h]
    p = subprocess.run(cmd, input=body, capture_output=True, check=True)
    head = p.stdout.decode()
    status = int(head.split()[1])
    return status, head, p.stderr


def j(**kw):
    return json.dumps(kw).encode()


# ---- raw binary requests -------------------------------------------------------------

def test_raw_binary_request(server):
    x = np.array([1.5, -2, 3, 4e9, 5, 6], np.float32)
    status, head, body = post(server, "/v2/models/identity/infer", x.tobytes(),
                              ["Inference-Header-Content-Length: 0",
                               "Content-Type: application/octet-stream"])
    assert status == 200, body
    hl = int([l for l in head.splitlines() if l.lower().startswith("inference-header-content-length")][0].split(":")[1])
    meta = json.loads(body[:hl])
    out = meta["outputs"][0]
    # batch 1 prepended (the model batches), the variable dimension deduced from the size;
    # every output binary
    assert out["shape"] == [1, 6] and out["datatype"] == "FP32"
    assert out["parameters"]["binary_data_size"] == 24
    np.testing.assert_array_equal(np.frombuffer(body[hl:], np.float32), x)


def test_raw_binary_bytes_and_fixed_shapes(server):
    status, head, body = post(server, "/v2/models/nobatch_int32/infer",
                              np.arange(6, dtype=np.int32).tobytes(), ["Inference-Header-Content-Length: 0"])
    assert status == 200, body
    hl = int([l for l in head.splitlines() if l.lower().startswith("inference-header-content-length")][0].split(":")[1])
    assert json.loads(body[:hl])["outputs"][0]["shape"] == [2, 3]
    status, _, body = post(server, "/v2/models/nobatch_int32/infer", b"\0" * 12,
                           ["Inference-Header-Content-Length: 0"])
    assert status == 400 and b"not a whole number of 8-byte rows" in body
    # BYTES: shape [1] needed (identity_string has [-1]): Triton's text
    status, _, body = post(server, "/v2/models/identity_string/infer", b"hello",
                           ["Inference-Header-Content-Length: 0"])
    assert status == 400 and b"For BYTE datatype raw input 'INPUT0', the model must have input shape [1]" in body
    status, _, body = post(server, "/v2/models/identity_pair/infer", b"\0" * 16,
                           ["Inference-Header-Content-Length: 0"])
    assert status == 400 and b"Raw request must only have 1 input (found 1) to be deduced but got 2 inputs" in body
    status, _, body = post(server, "/v2/models/identity/infer", b"\0" * ((1 << 20) + 4),
                           ["Inference-Header-Content-Length: 0"])
    assert status == 400 and b"exceeds the maximum allowed value of 1048576 bytes. Use --http-max-input-size" in body


# ---- classification ------------------------------------------------------------------

def test_classification_with_labels(client):
    x = np.array([[0.1, 0.7, 0.15, 0.05], [3, 1, 4, 2]], np.float32)
    inp = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    for binary in (False, True):
        out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=3)
        r = client.infer("classifier", [inp], outputs=[out])
        o = r.get_output("OUTPUT0")
        assert o["datatype"] == "BYTES" and o["shape"] == [2, 3]
        got = [[e if isinstance(e, bytes) else e.encode() for e in row] for row in r.as_numpy("OUTPUT0").tolist()]
        assert got == [[b"0.700000:1:dog", b"0.150000:2:bird", b"0.100000:0:cat"],
                       [b"4.000000:2:bird", b"3.000000:0:cat", b"2.000000:3:fish"]]
    # no label file: "value:index"; K above the row clipped
    inp = httpclient.InferInput("INPUT0", [1, 3], "FP32")
    inp.set_data_from_numpy(np.array([[5, 9, 1]], np.float32))
    r = client.infer("identity", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=10,
                                                                                 binary_data=True)])
    assert r.as_numpy("OUTPUT0").tolist() == [[b"9.000000:1", b"5.000000:0", b"1.000000:2"]]


def test_classification_errors(server, client):
    inp = httpclient.InferInput("INPUT0", [1, 2], "BYTES")
    inp.set_data_from_numpy(np.array([[b"a", b"b"]], np.object_))
    with pytest.raises(InferenceServerException, match="class result not available for output due to unsupported type 'BYTES'"):
        client.infer("identity_string", [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=1)])
    body = j(inputs=[{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [1]}],
             outputs=[{"name": "OUTPUT0", "parameters": {"classification": "two"}}])
    status, _, b = post(server, "/v2/models/identity/infer", body)
    assert status == 400 and b"Unable to parse 'classification'" in b
    assert client.is_server_live()


def test_label_file_missing_fails_the_load(tmp_path):
    repo = str(tmp_path)
    add_model(repo, "classifier", CLASSIFIER)
    with Server(repo, args=["--strict-readiness", "false"]) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        idx = {m["name"]: m for m in c.get_model_repository_index()}
        assert idx["classifier"]["state"] == "UNAVAILABLE"
        assert "label_filename 'labels.txt'" in idx["classifier"]["reason"]
        c.close()


# ---- compression ---------------------------------------------------------------------

def test_compressed_requests_and_responses(client):
    x = np.arange(64, dtype=np.float32).reshape(1, 64)
    inp = httpclient.InferInput("INPUT0", [1, 64], "FP32")
    for binary in (False, True):
        inp.set_data_from_numpy(x, binary_data=binary)
        for req_alg in (None, "gzip", "deflate"):
            for resp_alg in (None, "gzip", "deflate"):
                r = client.infer("identity", [inp], request_compression_algorithm=req_alg,
                                 response_compression_algorithm=resp_alg,
                                 outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
                np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)


def test_compression_with_curl(server):
    body = j(inputs=[{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}])
    status, head, b = post(server, "/v2/models/identity/infer", gzip.compress(body),
                           ["Content-Encoding: gzip", "Accept-Encoding: gzip"])
    assert status == 200 and "content-encoding: gzip" in head.lower()
    assert json.loads(gzip.decompress(b))["outputs"][0]["data"] == [1, 2, 3]
    status, head, b = post(server, "/v2/models/identity/infer", zlib.compress(body),
                           ["Content-Encoding: deflate", "Accept-Encoding: br, deflate;q=0.8, gzip;q=0.5"])
    assert status == 200 and "content-encoding: deflate" in head.lower()
    assert json.loads(zlib.decompress(b))["outputs"][0]["data"] == [1, 2, 3]


def test_bad_compressed_bodies(server, client):
    body = j(inputs=[{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}])
    z = bytearray(gzip.compress(body))
    z[len(z) // 2] ^= 0xFF
    status, _, b = post(server, "/v2/models/identity/infer", bytes(z), ["Content-Encoding: gzip"])
    assert status == 400 and b"failed to decompress the request body" in b
    status, _, b = post(server, "/v2/models/identity/infer", gzip.compress(body)[:-6], ["Content-Encoding: gzip"])
    assert status == 400 and b"failed to decompress" in b
    status, _, b = post(server, "/v2/models/identity/infer", b"plain text", ["Content-Encoding: gzip"])
    assert status == 400
    status, _, b = post(server, "/v2/models/identity/infer", body, ["Content-Encoding: br"])
    assert status == 400 and b"Unsupported compression type" in b
    # a zip bomb: 256 MiB of zeros in ~250 KiB, against the 1 MiB --http-max-input-size
    bomb = zlib.compressobj(9, zlib.DEFLATED, 31)
    zb = b"".join(bomb.compress(b"\0" * (1 << 20)) for _ in range(256)) + bomb.flush()
    status, _, b = post(server, "/v2/models/identity/infer", zb, ["Content-Encoding: gzip"])
    assert status == 400 and b"Decompressed data size exceeds the maximum allowed value of 1048576 bytes" in b
    # the server is unharmed
    inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
    inp.set_data_from_numpy(np.ones((1, 2), np.float32))
    assert client.infer("identity", [inp]).as_numpy("OUTPUT0").tolist() == [[1, 1]]


# ---- JSON numbers, depth, precedence --------------------------------------------------

def test_exact_int64_and_uint64_in_json(server):
    i64 = [9223372036854775807, -9223372036854775808, 9007199254740993, -1]
    u64 = [18446744073709551615, 9007199254740993, 0]
    for model, dt, vals in (("identity_int64", "INT64", i64), ("identity_uint64", "UINT64", u64)):
        body = j(inputs=[{"name": "INPUT0", "shape": [1, len(vals)], "datatype": dt, "data": vals}])
        status, _, b = post(server, f"/v2/models/{model}/infer", body)
        assert status == 200, b
        assert json.loads(b)["outputs"][0]["data"] == vals  # Python's json keeps big ints exact
    body = j(inputs=[{"name": "INPUT0", "shape": [1, 1], "datatype": "INT64", "data": [9223372036854775808]}])
    status, _, b = post(server, "/v2/models/identity_int64/infer", body)
    assert status == 400 and b"value 9223372036854775808 is out of range for INT64" in b
    body = j(inputs=[{"name": "INPUT0", "shape": [1, 1], "datatype": "UINT64", "data": [-1]}])
    status, _, b = post(server, "/v2/models/identity_uint64/infer", body)
    assert status == 400 and b"value -1 is out of range for UINT64" in b


def test_json_depth_100(server):
    def nested(depth):  # data nested `depth` levels inside the request object
        inner = "[" * (depth - 3) + "1" + "]" * (depth - 3)
        return ('{"inputs":[{"name":"INPUT0","shape":[1,1],"datatype":"FP32","data":' + inner + "}]}").encode()
    status, _, b = post(server, "/v2/models/identity/infer", nested(100))
    assert status == 200, b
    status, _, b = post(server, "/v2/models/identity/infer", nested(101))
    assert status == 400 and b"JSON nesting depth exceeds maximum allowed limit (100)" in b


def test_binary_data_output_precedence(server, client):
    x = np.ones((1, 4), np.float32)
    pair0 = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    pair0.set_data_from_numpy(x)
    pair1 = httpclient.InferInput("INPUT1", [1, 4], "INT32")
    pair1.set_data_from_numpy(np.ones((1, 4), np.int32))
    # request-level binary_data_output: true, OUTPUT0 listed without binary_data -> JSON
    # (Triton: a listed output's own setting wins; the default covers unlisted ones)
    r = client.infer("identity_pair", [pair0, pair1], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
    assert "data" in r.get_output("OUTPUT0") and r.get_output("OUTPUT1") is None
    body = j(parameters={"binary_data_output": True},
             inputs=[{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 1, 1, 1]},
                     {"name": "INPUT1", "shape": [1, 4], "datatype": "INT32", "data": [1, 1, 1, 1]}],
             outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT1", "parameters": {"binary_data": True}}])
    status, head, b = post(server, "/v2/models/identity_pair/infer", body)
    assert status == 200
    hl = int([l for l in head.splitlines() if l.lower().startswith("inference-header-content-length")][0].split(":")[1])
    outs = {o["name"]: o for o in json.loads(b[:hl])["outputs"]}
    assert outs["OUTPUT0"]["data"] == [1, 1, 1, 1]
    assert outs["OUTPUT1"]["parameters"]["binary_data_size"] == 16


# ---- limits and texts -----------------------------------------------------------------

def raw_http(server, data):
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                cl = [l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(rest) >= int(cl[0].split(b":")[1]):
                    break
        return out


def test_chunk_count_limit(server, client):
    body = j(inputs=[{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [7]}])

    def chunked(n_chunks):
        step = max(1, len(body) // n_chunks)
        return [body[i:i + step] for i in range(0, len(body), step)]

    head = (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n")
    ok = chunked(16)
    assert len(ok) <= 64
    resp = raw_http(server, head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in ok) + b"0\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 200"), resp[:200]
    many = [body[i:i + 1] for i in range(len(body))]
    assert len(many) > 64
    resp = raw_http(server, head + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in many) + b"0\r\n\r\n")
    assert resp.startswith(b"HTTP/1.1 400") and b"more chunks than the limit" in resp, resp[:300]
    assert client.is_server_live()


def test_triton_error_texts(server, client):
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found"):
        client.infer("nope", [httpclient.InferInput("INPUT0", [1], "FP32")])
    big = j(inputs=[{"name": "INPUT0", "shape": [1, 400000], "datatype": "FP32", "data": [0] * 400000}])
    status, _, b = post(server, "/v2/models/identity/infer", big)
    assert status == 400 and b"request JSON size of" in b and b"Use --http-max-input-size" in b
    big = j(inputs=[{"name": "INPUT0", "shape": [1, 300000], "datatype": "FP32", "data": [0] * 300000}])
    status, _, b = post(server, "/v2/models/identity/infer", big)
    assert status == 400 and b"JSON input 'INPUT0' has a byte_size (1200000 bytes) that exceeds" in b
    body = j(inputs=[{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32"}])
    status, _, b = post(server, "/v2/models/identity/infer", body)
    assert status == 400 and b"Input must set only one of the following fields" in b and b"no field is set" in b
    md = client.get_server_metadata()
    for ext in ("classification", "system_shared_memory", "binary_tensor_data"):
        assert ext in md["extensions"]
