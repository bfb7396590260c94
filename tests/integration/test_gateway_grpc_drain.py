"""SIGTERM drain of `cinfer gateway` for gRPC, with tritonclient.grpc through the real
gateway: calls in flight (a unary call held by a gated Python model, an open
ModelStreamInfer stream) run to completion, new calls are refused with UNAVAILABLE, and the
gateway exits 0 once they are done; a call still running at the drain timeout is cut."""
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2, service_pb2_grpc

from cinfer_server import Server, copy_repo
from test_gateway_common import Gateway, wait_for

os.environ["CINFER_PYTHON"] = sys.executable

GATE_CONFIG = """
name: "gate"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 2 } ]
parameters { key: "gate" value: { string_value: "%s" } }
"""

# Holds each request until the gate file exists (bounded: 120 s), then echoes INPUT0.
GATE_PY = """
import json, os, time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.gate = cfg["parameters"]["gate"]["string_value"]

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            deadline = time.monotonic() + 120
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", x)]))
        return out
"""


@pytest.fixture
def replica():
    work = tempfile.mkdtemp(prefix="cinfer-drain-")
    gate = os.path.join(work, "open")
    repo = copy_repo(["identity"], os.path.join(work, "repo"))
    os.makedirs(os.path.join(repo, "gate", "1"))
    with open(os.path.join(repo, "gate", "config.pbtxt"), "w") as f:
        f.write(GATE_CONFIG % gate)
    with open(os.path.join(repo, "gate", "1", "model.py"), "w") as f:
        f.write(GATE_PY)
    try:
        with Server(repo) as s:
            s.wait_ready()
            s.gate = gate
            yield s
    finally:
        shutil.rmtree(work)


def start_gateway(r, drain_ms):
    gw = Gateway({"listen": {"drain_timeout_ms": drain_ms}},
                 args=["--grpc-port", "0", "--health-interval-ms", "200", "--health-timeout-ms", "200",
                       "--upstream", f"127.0.0.1:{r.port},grpc={r.grpc_port}"])
    gw.start()
    wait_for(lambda: any(x["state"] == "healthy" and "gate" in x.get("models", [])
                         for x in gw.status()["replicas"]), 60, "a healthy replica with the gate model")
    gw.grpc_url = f"127.0.0.1:{gw.grpc_port}"
    return gw


def inp(x):
    i = tg.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i


def new_call_refused(gw):
    """A fresh client's unary call once the drain began: UNAVAILABLE (never served)."""
    ch = grpc.insecure_channel(gw.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
    try:
        stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=5)
        return False  # the drain has not started yet
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
        return True
    finally:
        ch.close()


def test_sigterm_waits_for_unary_calls_and_streams(replica):
    gw = start_gateway(replica, 60000)
    try:
        x = np.arange(8, dtype=np.float32)
        # a stream, open, with one answered request
        sc = tg.InferenceServerClient(gw.grpc_url)
        q = queue.Queue()
        sc.start_stream(callback=lambda result, error: q.put((result, error)))
        sc.async_stream_infer("identity", [inp(x.reshape(1, 8))], request_id="before")
        r, e = q.get(timeout=60)
        assert e is None and r.get_response().id == "before", e and e.message()
        # a unary call, held by the gate
        uc = tg.InferenceServerClient(gw.grpc_url)
        done = {}
        t = threading.Thread(target=lambda: done.setdefault("r", uc.infer("gate", [inp(x)], client_timeout=120)))
        t.start()
        wait_for(lambda: gw.status()["active"] >= 2, 60, "the stream and the unary call in flight")

        gw.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: new_call_refused(gw), 30, "new calls refused")
        # the open stream still carries requests
        sc.async_stream_infer("identity", [inp(x.reshape(1, 8) + 1)], request_id="during")
        r, e = q.get(timeout=60)
        assert e is None and r.get_response().id == "during", e and e.message()
        assert np.array_equal(r.as_numpy("OUTPUT0"), x.reshape(1, 8) + 1)
        assert gw.proc.poll() is None  # still draining: both calls are alive
        # release the unary call: it completes through the draining gateway
        open(replica.gate, "w").close()
        t.join(120)
        assert np.array_equal(done["r"].as_numpy("OUTPUT0"), x)
        assert gw.proc.poll() is None  # the stream is still open
        sc.stop_stream()
        sc.close()
        uc.close()
        gw.proc.wait(60)  # exits at once, well before the 60 s drain timeout
        assert gw.proc.returncode == 0
        gw.reader.join(5)
        log = "".join(gw.log)
        assert "gRPC calls still running are cut" not in log, log
        assert "(0 connections forced closed)" in log, log
    finally:
        gw.stop()


def test_drain_timeout_cuts_what_is_still_running(replica):
    gw = start_gateway(replica, 300)
    try:
        uc = tg.InferenceServerClient(gw.grpc_url)
        err = {}

        def call():
            try:
                uc.infer("gate", [inp(np.zeros(2, dtype=np.float32))], client_timeout=120)
            except Exception as e:  # noqa: BLE001: the cut call's error is the result
                err["e"] = e

        t = threading.Thread(target=call)
        t.start()
        wait_for(lambda: gw.status()["active"] >= 1, 60, "the unary call in flight")
        gw.proc.send_signal(signal.SIGTERM)
        gw.proc.wait(60)
        t.join(60)
        assert gw.proc.returncode == 0
        assert "e" in err, "the held call should have been cut at the drain timeout"
        gw.reader.join(5)
        log = "".join(gw.log)
        assert "1 gRPC calls still running are cut" in log, log
        open(replica.gate, "w").close()  # lets the replica's instance finish
        uc.close()
    finally:
        gw.stop()
