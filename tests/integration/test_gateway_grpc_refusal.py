"""A replica's gRPC admission refusal (UNAVAILABLE with gRPC's retry pushback: the model is
at its cinfer.max_inflight, nothing was done) through the real gateway in front of two real
`cinfer serve` replicas, with tritonclient.grpc and grpcio (docs/gateway.md#retries-and-refusals),
as test_gateway_llm_refusal.py does over HTTP:

- the server's UNAVAILABLE carries the trailing metadata grpc-retry-pushback-ms: 1000 (the
  gRPC equivalent of Retry-After: 1);
- the gateway retries the refused call once on the other replica, so the user gets an
  answer, and counts the refusal in cinfer_gateway_upstream_refusals_total;
- the refusing replica is never ejected nor marked unhealthy for it, although the outlier
  setting ejects after a single failure;
- with retries off, the refusal reaches the client as UNAVAILABLE with its pushback.

The model is a Python model that answers once its gate file exists. Replica a (max_inflight
1) is made full by one request sent to it directly while its gate is closed; replica b's gate
is open. No timing is asserted; waits are on conditions with bounds."""
import http.client
import json
import os
import re
import shutil
import sys
import tempfile
import threading

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2, service_pb2_grpc

from cinfer_server import Server
from test_gateway_common import Gateway, wait_for

os.environ["CINFER_PYTHON"] = sys.executable
MODEL = "gate"
MODEL_PY = """
import json, os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        p = json.loads(args["model_config"])["parameters"]
        self.gate = p["gate"]["string_value"]
    def execute(self, requests):
        open(self.gate + ".started", "w").close()
        deadline = time.monotonic() + 300  # bounded: the test opens the gate
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""


def repo(gate, max_inflight):
    d = tempfile.mkdtemp(prefix="cinfer-gw-gate-")
    os.makedirs(os.path.join(d, MODEL, "1"))
    with open(os.path.join(d, MODEL, "1", "model.py"), "w") as f:
        f.write(MODEL_PY)
    with open(os.path.join(d, MODEL, "config.pbtxt"), "w") as f:
        f.write(f"""name: "{MODEL}"
backend: "python"
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
parameters {{ key: "gate" value: {{ string_value: "{gate}" }} }}
parameters {{ key: "cinfer.max_inflight" value: {{ string_value: "{max_inflight}" }} }}
""")
    return d


@pytest.fixture(scope="module")
def replicas():
    tmp = tempfile.mkdtemp(prefix="cinfer-gw-gates-")
    gate_a, gate_b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
    open(gate_b, "w").close()  # b answers at once
    ra, rb = repo(gate_a, 1), repo(gate_b, 0)
    try:
        with Server(ra) as a, Server(rb) as b:
            a.wait_ready()
            b.wait_ready()
            a.gate = gate_a
            yield a, b
    finally:
        open(gate_a, "w").close()
        for d in (ra, rb, tmp):
            shutil.rmtree(d, ignore_errors=True)


class Fill:
    """One request held inside replica a's model (its gate closed): a is at max_inflight."""

    def __init__(self, a):
        self.a = a
        for p in (a.gate, a.gate + ".started"):
            if os.path.exists(p):
                os.unlink(p)
        self.status = None
        self.t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        c = http.client.HTTPConnection("127.0.0.1", self.a.port, timeout=300)
        c.request("POST", f"/v2/models/{MODEL}/infer", body=json.dumps(
            {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [7.0]}]}))
        self.status = c.getresponse().status
        c.close()

    def __enter__(self):
        self.t.start()
        wait_for(lambda: os.path.exists(self.a.gate + ".started"), 60, "the filling request inside the model")
        return self

    def __exit__(self, *exc):
        open(self.a.gate, "w").close()
        self.t.join(120)
        assert self.status == 200


def gateway(a, b, retries):
    cfg = {"upstreams": {"static": [{"address": r.hostport, "grpc_port": r.grpc_port} for r in (a, b)],
                         "models_interval_ms": 200},
           "health": {"interval_ms": 1000, "timeout_ms": 1000, "healthy_threshold": 1,
                      "unhealthy_threshold": 5},
           "balancer": "round_robin",
           # one failure ejects: a refusal counted as a failure would eject replica a
           "outlier": {"consecutive_failures": 1, "base_ejection_ms": 60000, "max_ejected_percent": 50},
           "retry": {"retries": retries, "budget_min": 50}}
    gw = Gateway(cfg, args=["--grpc-port", "0"])
    return gw


def ready(gw):
    wait_for(lambda: all(MODEL in r["models"] and r["state"] == "healthy" for r in gw.status()["replicas"]),
             30, "both replicas healthy with the model")


def request(i):
    req = service_pb2.ModelInferRequest(model_name=MODEL)
    t = req.inputs.add(name="IN", datatype="FP32", shape=[1])
    t.contents.fp32_contents.append(float(i))
    return req


def call(port, i):
    """One unary ModelInfer; returns (response or None, RpcError or None)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        try:
            return stub.ModelInfer(request(i), timeout=300), None
        except grpc.RpcError as e:
            return None, e


def pushback(e):
    return dict(e.trailing_metadata() or ()).get("grpc-retry-pushback-ms")


def gw_metric(gw, name, upstream):
    """A gateway counter of this upstream (and the model, where it has that label)."""
    for line in gw.metrics().splitlines():
        m = re.match(r'%s\{upstream="%s"(?:,model="([^"]*)")?\} (\S+)' % (name, re.escape(upstream)), line)
        if m and m.group(1) in (None, MODEL):
            return float(m.group(2))
    return 0.0


def grpc_calls(gw, upstream, code):
    for line in gw.metrics().splitlines():
        if line.startswith(f'cinfer_gateway_grpc_requests_total{{upstream="{upstream}",method="ModelInfer",code="{code}"}}'):
            return float(line.split()[-1])
    return 0.0


def test_refusal_is_marked_retried_on_the_other_replica_and_not_a_failure(replicas):
    a, b = replicas
    with Fill(a):
        # the replica itself: UNAVAILABLE, its reason, and the pushback marker
        resp, e = call(a.grpc_port, 0)
        assert resp is None and e.code() == grpc.StatusCode.UNAVAILABLE, e
        assert "max_inflight" in e.details(), e.details()
        assert pushback(e) == "1000", e.trailing_metadata()
        with gateway(a, b, retries=1) as gw:
            gw.wait_ready()
            ready(gw)
            c = tg.InferenceServerClient(f"127.0.0.1:{gw.grpc_port}")
            # round robin sends every second call to a first: each is refused there and
            # answered by b
            for i in range(6):
                x = tg.InferInput("IN", [1], "FP32")
                x.set_data_from_numpy(np.array([i], dtype=np.float32))
                assert c.infer(MODEL, [x]).as_numpy("OUT").tolist() == [float(i)]
            c.close()
            n = gw_metric(gw, "cinfer_gateway_upstream_refusals_total", a.hostport)
            assert n >= 1
            assert gw_metric(gw, "cinfer_gateway_retries_total", a.hostport) == n
            assert gw_metric(gw, "cinfer_gateway_ejections_total", a.hostport) == 0
            assert gw.replica(a.hostport)["state"] == "healthy"
            assert gw_metric(gw, "cinfer_gateway_upstream_healthy", a.hostport) == 1
            assert grpc_calls(gw, b.hostport, 0) == 6  # every call was answered by b


def test_refusal_passes_on_with_its_pushback_when_retries_are_off(replicas):
    a, b = replicas
    with gateway(a, b, retries=0) as gw:
        gw.wait_ready()
        ready(gw)
        with Fill(a):
            refusals = 0
            for i in range(6):
                resp, e = call(gw.grpc_port, i)
                if e is None:
                    assert resp.model_name == MODEL
                    continue
                assert e.code() == grpc.StatusCode.UNAVAILABLE, e
                assert "max_inflight" in e.details(), e.details()
                assert pushback(e) == "1000", e.trailing_metadata()
                refusals += 1
            assert refusals >= 2  # round robin: several reached a, none ejected it
            assert gw_metric(gw, "cinfer_gateway_upstream_refusals_total", a.hostport) == refusals
            assert gw_metric(gw, "cinfer_gateway_ejections_total", a.hostport) == 0
            assert gw.replica(a.hostport)["state"] == "healthy"
        # a answers again, over gRPC through the gateway (round robin reaches it)
        for i in range(4):
            resp, e = call(gw.grpc_port, 100 + i)
            assert e is None, e
        assert grpc_calls(gw, a.hostport, 0) >= 1
