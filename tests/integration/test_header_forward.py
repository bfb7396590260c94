"""Triton's --http-header-forward-pattern / --grpc-header-forward-pattern and its reserved
parameter keys, with tritonclient HTTP and gRPC and raw requests against the real binary:
matching headers (case-insensitively, or case-sensitively after "(?-i)") reach the model as
string request parameters; a matched header named as a reserved parameter, and a request
parameter starting with "triton_", are refused with Triton's texts; nothing else changes."""
import json
import os
import sys
import tempfile
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server

os.environ["CINFER_PYTHON"] = sys.executable  # the stub's interpreter (it has numpy)

PARAMS_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "PARAMS", np.array([r.parameters().encode()], dtype=np.object_))]) for r in requests]
"""
PARAMS_CONFIG = """
name: "params"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

HEADERS = {"header_1": "value_1", "my_header_1": "my_value_1",
           "My_Header_2": 'a "quoted" value with a backslash\\'}  # HTTP drops trailing whitespace (RFC 9110)


def repo():
    d = tempfile.mkdtemp(prefix="cinfer-fwd-")
    os.makedirs(os.path.join(d, "params", "1"))
    with open(os.path.join(d, "params", "config.pbtxt"), "w") as f:
        f.write(PARAMS_CONFIG)
    with open(os.path.join(d, "params", "1", "model.py"), "w") as f:
        f.write(PARAMS_PY)
    return d


@pytest.fixture(scope="module")
def server():
    with Server(repo(), args=["--http-header-forward-pattern", "MY_HEADER.*",
                              "--grpc-header-forward-pattern", "MY_HEADER.*"]) as s:
        s.wait_ready()
        yield s


def infer(client_mod, url, headers, parameters=None):
    c = client_mod.InferenceServerClient(url)
    headers = dict(headers)  # tritonclient.http adds its own headers to the dict it is given
    if client_mod is grpcclient:  # gRPC metadata keys must be lowercase
        headers = {k.lower(): v for k, v in headers.items()}
    x = client_mod.InferInput("INPUT0", [1], "FP32")
    x.set_data_from_numpy(np.array([1], dtype=np.float32))
    r = c.infer("params", [x], headers=headers, parameters=parameters)
    return json.loads(r.as_numpy("PARAMS")[0])


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_matching_headers_become_parameters(server, proto):
    mod, url = (httpclient, server.hostport) if proto == "http" else (grpcclient, f"127.0.0.1:{server.grpc_port}")
    got = infer(mod, url, HEADERS, parameters={"key1": "v1"})
    got = {k.lower(): v for k, v in got.items()}  # gRPC metadata keys arrive lowercased
    assert got == {"key1": "v1", "my_header_1": "my_value_1", "my_header_2": HEADERS["My_Header_2"]}


@pytest.mark.parametrize("proto", ["http", "grpc"])
@pytest.mark.parametrize("name", ["my_header_priority"])  # matches but is not reserved
def test_a_matching_unreserved_name_is_forwarded(server, proto, name):
    mod, url = (httpclient, server.hostport) if proto == "http" else (grpcclient, f"127.0.0.1:{server.grpc_port}")
    assert infer(mod, url, {name: "x"}).get(name) == "x"


def raw(server, body, headers=None):
    req = urllib.request.Request(server.url + "/v2/models/params/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}


@pytest.mark.parametrize("key", ["triton_anything", "triton_enable_empty_final_response"])
def test_triton_parameters_are_refused(server, key):
    code, text = raw(server, {**BODY, "parameters": {key: "x"}})
    assert code == 400
    assert "parameter keys starting with 'triton_' are reserved for Triton usage" in text


def test_grpc_triton_parameter_is_refused(server):
    with pytest.raises(InferenceServerException) as e:
        infer(grpcclient, f"127.0.0.1:{server.grpc_port}", {}, parameters={"triton_x": "1"})
    assert "parameter keys starting with 'triton_' are reserved for Triton usage" in str(e.value)
    assert infer(grpcclient, f"127.0.0.1:{server.grpc_port}", {}, parameters={"x": "1"}) == {"x": "1"}


def test_reserved_names_are_not_forwarded():
    with Server(repo(), args=["--http-header-forward-pattern", ".*", "--grpc-header-forward-pattern", ".*"]) as s:
        s.wait_ready()
        for key in ["sequence_id", "priority", "timeout", "headers", "binary_data_output", "triton_x"]:
            code, text = raw(s, BODY, {key: "v"})
            assert code == 400, key
            assert f"header '{key}' is reserved for triton usage and cannot be forwarded." in text.lower()
            with pytest.raises(InferenceServerException) as e:
                infer(grpcclient, f"127.0.0.1:{s.grpc_port}", {key: "v"})
            assert "reserved for Triton usage" in str(e.value)
        # the server is unharmed and still forwards the rest
        assert raw(s, BODY, {"x-team": "a"})[0] == 200


def test_case_sensitive_pattern():
    with Server(repo(), args=["--grpc-header-forward-pattern", "(?-i)MY_HEADER.*",
                              "--http-header-forward-pattern", "(?-i)my_header_1"]) as s:
        s.wait_ready()
        # gRPC metadata keys are lowercase: an upper-case, case-sensitive pattern matches none
        assert infer(grpcclient, f"127.0.0.1:{s.grpc_port}", HEADERS) == {}
        assert infer(httpclient, s.hostport, HEADERS) == {"my_header_1": "my_value_1"}


def test_without_a_pattern_nothing_is_forwarded():
    with Server(repo()) as s:
        s.wait_ready()
        assert infer(httpclient, s.hostport, HEADERS) == {}
        assert infer(grpcclient, f"127.0.0.1:{s.grpc_port}", HEADERS) == {}
