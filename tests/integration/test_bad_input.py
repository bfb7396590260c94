"""Table-driven bad input: each case gets the right 4xx/5xx status and a message naming the
problem, and afterwards the server still answers a good request."""
import http.client
import json
import socket
import struct
import time

import pytest

from cinfer_server import Server

GOOD = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}


def j(obj):
    return json.dumps(obj).encode()


def inp(**kw):
    base = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
    base.update(kw)
    return j({"inputs": [base]})


def binary_body(header, payload):
    h = j(header)
    return h + payload, {"Inference-Header-Content-Length": str(len(h))}


def bin_case(shape, datatype, size, payload):
    hdr = {"inputs": [{"name": "INPUT0", "datatype": datatype, "shape": shape,
                       "parameters": {"binary_data_size": size}}]}
    return binary_body(hdr, payload)


B1 = bin_case([1, 4], "FP32", 16, b"\0" * 16 + b"xx")                 # leftover bytes
B2 = bin_case([1, 4], "FP32", 64, b"\0" * 16)                          # size past the end
B3 = bin_case([1, 4], "FP32", 15, b"\0" * 15)                          # wrong byte size
B4 = bin_case([1, 2], "BYTES", 6, struct.pack("<I", 2) + b"hi")        # 2nd length missing
B5 = bin_case([1, 1], "BYTES", 8, struct.pack("<I", 100) + b"abcd")    # length past end

# (name, method, path, body, headers, status, message fragment)
CASES = [
    ("unknown model", "POST", "/v2/models/nope/infer", j(GOOD), {}, 404, "unknown model"),
    ("unknown version", "POST", "/v2/models/identity/versions/9/infer", j(GOOD), {}, 404, "unknown version 9"),
    ("invalid version", "POST", "/v2/models/identity/versions/x1/infer", j(GOOD), {}, 400, "invalid model version"),
    ("malformed json", "POST", "/v2/models/identity/infer", b'{"inputs": [', {}, 400, "malformed JSON"),
    ("trailing data", "POST", "/v2/models/identity/infer", j(GOOD) + b" x", {}, 400, "unexpected data after the JSON value"),
    ("raw control char", "POST", "/v2/models/identity/infer", b'{"id": "a\tb", "inputs": []}', {}, 400, "control character in a string"),
    ("bad escape", "POST", "/v2/models/identity/infer", b'{"id": "\\ud800", "inputs": []}', {}, 400, "high surrogate without its low half"),
    ("empty body", "POST", "/v2/models/identity/infer", b"", {}, 400, "empty request body"),
    ("not an object", "POST", "/v2/models/identity/infer", b"[1,2]", {}, 400, "must be a JSON object"),
    ("no inputs", "POST", "/v2/models/identity/infer", j({"id": "a"}), {}, 400, "non-empty 'inputs'"),
    ("empty inputs", "POST", "/v2/models/identity/infer", j({"inputs": []}), {}, 400, "non-empty 'inputs'"),
    ("input not object", "POST", "/v2/models/identity/infer", j({"inputs": [3]}), {}, 400, "inputs[0] must be an object"),
    ("input without name", "POST", "/v2/models/identity/infer", j({"inputs": [{"datatype": "FP32"}]}), {}, 400, "needs a non-empty string 'name'"),
    ("unknown input", "POST", "/v2/models/identity/infer", inp(name="X"), {}, 400, "unexpected inference input 'X'"),
    ("wrong datatype", "POST", "/v2/models/identity/infer", inp(datatype="INT32"), {}, 400, "data-type is 'INT32', but model 'identity' expects 'FP32'"),
    ("unknown datatype", "POST", "/v2/models/identity/infer", inp(datatype="FLOAT"), {}, 400, "unknown datatype 'FLOAT'"),
    ("wrong rank", "POST", "/v2/models/identity/infer", inp(shape=[4], data=[1, 2, 3, 4]), {}, 400, "unexpected shape for input 'INPUT0'"),
    ("negative dim", "POST", "/v2/models/identity/infer", inp(shape=[1, -4]), {}, 400, "shape[1] must be a non-negative integer"),
    ("too few elements", "POST", "/v2/models/identity/infer", inp(data=[1, 2, 3]), {}, 400, "has 3 elements but the shape needs 4"),
    ("too many elements", "POST", "/v2/models/identity/infer", inp(data=[1, 2, 3, 4, 5]), {}, 400, "more elements than the shape"),
    ("string in FP32", "POST", "/v2/models/identity/infer", inp(data=[1, "a", 3, 4]), {}, 400, "FP32 data must be numbers"),
    ("int8 out of range", "POST", "/v2/models/identity_int8/infer", inp(datatype="INT8", data=[1, 2, 300, 4]), {}, 400, "out of range for INT8"),
    ("fraction in INT32", "POST", "/v2/models/identity_int32/infer", inp(datatype="INT32", data=[1, 2.5, 3, 4]), {}, 400, "must be integers"),
    ("bool as number", "POST", "/v2/models/identity_bool/infer", inp(datatype="BOOL", data=[1, 0, 1, 0]), {}, 400, "BOOL data must be true or false"),
    ("batch too large", "POST", "/v2/models/identity_fp32/infer", inp(shape=[9, 1], data=[0] * 9), {}, 400, "batch size 9; model 'identity_fp32' accepts 1 to 8"),
    ("too many elements limit", "POST", "/v2/models/identity/infer", inp(shape=[1, 200000], data=[]), {}, 400, "more than the limit of 100000 elements"),
    ("deep nesting", "POST", "/v2/models/identity/infer", b"[" * 101 + b"]" * 101, {}, 400, "JSON nesting depth exceeds maximum allowed limit (100)"),
    ("duplicate input", "POST", "/v2/models/identity/infer", j({"inputs": [GOOD["inputs"][0], GOOD["inputs"][0]]}), {}, 400, "appears more than once"),
    ("missing input", "POST", "/v2/models/identity_pair/infer", j(GOOD), {}, 400, "input 'INPUT1' is missing"),
    ("unknown output", "POST", "/v2/models/identity/infer", j(dict(GOOD, outputs=[{"name": "NOPE"}])), {}, 400, "unexpected inference output 'NOPE'"),
    ("classification", "POST", "/v2/models/identity/infer", j(dict(GOOD, outputs=[{"name": "OUTPUT0", "parameters": {"classification": -2}}])), {}, 400, "Unable to parse 'classification'"),
    ("data and binary", "POST", "/v2/models/identity/infer", inp(parameters={"binary_data_size": 16}), {}, 400, "But set 'data' 'binary_data_size'"),
    ("binary leftovers", "POST", "/v2/models/identity/infer", B1[0], B1[1], 400, "2 bytes of binary data follow"),
    ("binary size past end", "POST", "/v2/models/identity/infer", B2[0], B2[1], 400, "binary_data_size 64 exceeds the 16 bytes"),
    ("binary wrong size", "POST", "/v2/models/identity/infer", B3[0], B3[1], 400, "input byte size mismatch for input 'INPUT0' for model 'identity'. Expected 16, got 15"),
    ("bytes truncated prefix", "POST", "/v2/models/identity_string/infer", B4[0], B4[1], 400, "element 1 of 2 is missing its length"),
    ("bytes length past end", "POST", "/v2/models/identity_string/infer", B5[0], B5[1], 400, "claims 100 bytes, only 4 remain"),
    ("header length past body", "POST", "/v2/models/identity/infer", j(GOOD), {"Inference-Header-Content-Length": "99999"}, 400, "larger than the body"),
    ("header length not a number", "POST", "/v2/models/identity/infer", j(GOOD), {"Inference-Header-Content-Length": "12x"}, 400, "must be a non-negative integer"),
    ("priority not integer", "POST", "/v2/models/identity/infer", j(dict(GOOD, parameters={"priority": 1.5})), {}, 400, "'priority' must be an integer"),
    ("body too large", "POST", "/v2/models/identity/infer", b" " * (2 << 20), {}, 413, ""),
    ("wrong method", "GET", "/v2/models/identity/infer", None, {}, 405, "use POST"),
    ("wrong method index", "GET", "/v2/repository/index", None, {}, 405, "use POST"),
    ("unknown path", "GET", "/v3/whatever", None, {}, 404, "not found"),
    ("unknown stats model", "GET", "/v2/models/nope/stats", None, {}, 404, "does not exist"),
    ("load in mode none", "POST", "/v2/repository/models/nope/load", None, {}, 503, "explicit model load / unload is not allowed"),
    ("index bad body", "POST", "/v2/repository/index", b"{bad", {}, 400, "must be a JSON object"),
    # the counts a request brings are checked against the limits of include/cinfer/types.h
    ("too many inputs", "POST", "/v2/models/identity/infer",
     j({"inputs": [dict(GOOD["inputs"][0], name=f"I{i}") for i in range(4097)]}), {}, 400,
     "request has 4097 inputs; the limit is CINFER_MAX_INPUTS = 4096"),
    ("too many outputs", "POST", "/v2/models/identity/infer",
     j(dict(GOOD, outputs=[{"name": f"O{i}"} for i in range(4097)])), {}, 400,
     "request asks for 4097 outputs; the limit is CINFER_MAX_OUTPUTS = 4096"),
    ("too many dims", "POST", "/v2/models/identity/infer", inp(shape=[1] * 9, data=[1]), {}, 400,
     "shape has 9 dimensions; the limit is CINFER_MAX_DIMS = 8"),
]


@pytest.fixture(scope="module")
def server():
    args = ["--max-body-bytes", str(1 << 20), "--max-tensor-elements", "100000",
            "--http-header-timeout-ms", "500", "--http-body-timeout-ms", "500"]
    with Server(args=args) as s:
        s.wait_ready()
        yield s


def request(server, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def assert_good(server):
    status, data = request(server, "POST", "/v2/models/identity/infer", j(GOOD))
    assert status == 200, data
    assert json.loads(data)["outputs"][0]["data"] == [1, 2, 3, 4]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(server, case):
    name, method, path, body, headers, want_status, want_msg = case
    status, data = request(server, method, path, body, headers)
    assert status == want_status, (status, data)
    if want_msg:
        assert want_msg in json.loads(data)["error"], data
    assert_good(server)


def test_case_count():
    assert len(CASES) >= 25


def raw_exchange(server, payload, wait_close=True):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    s.sendall(payload)
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
        if not wait_close and b"\r\n\r\n" in out:
            break
    s.close()
    return out


def test_stalled_headers_get_408(server):
    out = raw_exchange(server, b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n")
    assert out.startswith(b"HTTP/1.1 408"), out
    assert_good(server)


def test_stalled_body_gets_408(server):
    out = raw_exchange(server, b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                               b"Content-Length: 100\r\n\r\n{\"inputs\":")
    assert out.startswith(b"HTTP/1.1 408"), out
    assert_good(server)


def test_header_too_large_431(server):
    out = raw_exchange(server, b"GET /v2 HTTP/1.1\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431"), out[:100]
    assert_good(server)


def test_garbage_request_line_400(server):
    out = raw_exchange(server, b"\x00\x01\x02 garbage\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400"), out
    assert_good(server)


def test_client_disconnect_mid_body(server):
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{")
    s.close()
    assert_good(server)


def test_many_bad_then_good_concurrently(server):
    import concurrent.futures as cf
    bad = [c for c in CASES if c[5] != 413]

    def run(i):
        c = bad[i % len(bad)]
        return request(server, c[1], c[2], c[3], c[4])[0] == c[5]

    with cf.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(run, range(200)))
    assert_good(server)
