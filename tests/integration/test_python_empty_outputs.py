"""A Python model whose response holds only empty tensors (here: the first response of a new
instance, before the stub has an output region) answers them as empty tensors. It used to
fail the request with "TypeError: 'NoneType' object does not support item assignment"
(Triton's L0_parameters model answers an empty key/value list when a request has no
parameters). Against the real binary with tritonclient HTTP and gRPC."""
import os
import sys
import tempfile

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from cinfer_server import Server

os.environ["CINFER_PYTHON"] = sys.executable

MODEL_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            p = json.loads(r.parameters())
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("KEYS", np.asarray(list(p.keys()), dtype=object)),
                pb_utils.Tensor("N", np.zeros([0], dtype=np.float32))]))
        return out
"""
CONFIG = """
name: "empty_out"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "KEYS" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "N" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


@pytest.mark.parametrize("proto", ["grpc", "http"])
def test_first_response_of_only_empty_tensors(proto):
    d = tempfile.mkdtemp(prefix="cinfer-empty-")
    os.makedirs(os.path.join(d, "empty_out", "1"))
    open(os.path.join(d, "empty_out", "config.pbtxt"), "w").write(CONFIG)
    open(os.path.join(d, "empty_out", "1", "model.py"), "w").write(MODEL_PY)
    with Server(d) as s:
        s.wait_ready()
        mod, url = (grpcclient, f"127.0.0.1:{s.grpc_port}") if proto == "grpc" else (httpclient, s.hostport)
        c = mod.InferenceServerClient(url)
        x = mod.InferInput("INPUT0", [1], "FP32")
        x.set_data_from_numpy(np.array([1], dtype=np.float32))
        r = c.infer("empty_out", [x])  # the instance's first response: nothing but empty tensors
        assert r.as_numpy("KEYS").shape == (0,) and r.as_numpy("N").shape == (0,)
        r = c.infer("empty_out", [x], parameters={"a": "b"})
        assert r.as_numpy("KEYS").tolist() == [b"a"]
        r = c.infer("empty_out", [x])
        assert r.as_numpy("KEYS").shape == (0,)
