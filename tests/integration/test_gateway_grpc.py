"""gRPC through `cinfer gateway --grpc-port`: tritonclient.grpc against two real
`cinfer serve` replicas behind the gateway (unary with raw and typed contents, the LLM's
token stream, server-level RPCs, the health service), the restricted control RPCs, a
replica killed mid-run (no unary call fails) and bad frames at the gateway."""
import hashlib
import os
import queue
import re
import signal
import socket
import tempfile
import threading

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from cinfer_server import Server
from test_gateway_common import Gateway, wait_for
from test_grpc import LIVE, PREFACE, frame, read_frames, req_headers

ADMIN = "gw-admin-secret"
OPERATOR_KEY = "op-key-secret"
TENANT_KEY = "tenant-key-secret"
LLM = "smollm2"


def key_line(kid, secret, role, models):
    return f"{kid} {hashlib.sha256(secret.encode()).hexdigest()} {role} {models}\n"


def serve(models):
    args = ["--model-control-mode", "explicit"]
    for m in models:
        args += ["--load-model", m]
    return Server(args=args)


def gateway(replicas, extra=(), keys=None):
    ups = []
    for r in replicas:
        ups += ["--upstream", f"127.0.0.1:{r.port},grpc={r.grpc_port}"]
    args = ["--grpc-port", "0", "--health-interval-ms", "200", "--health-timeout-ms", "200", "--admin-token", ADMIN] + ups + list(extra)
    if keys:
        args += ["--keys-file", keys]
    return Gateway({}, args=args)


def wait_models(gw, n, model):
    wait_for(lambda: sum(1 for r in gw.status()["replicas"] if model in r.get("models", []) and r["state"] == "healthy") >= n,
             30, f"{n} replicas with {model}")


@pytest.fixture(scope="module")
def cluster():
    with serve(["identity", "identity_string", LLM]) as a, serve(["identity", "identity_string", LLM]) as b:
        a.wait_ready()
        b.wait_ready()
        with gateway([a, b]) as gw:
            wait_models(gw, 2, LLM)
            gw.grpc_url = f"127.0.0.1:{gw.grpc_port}"
            yield gw, a, b


def ident(c, x, name="identity"):
    i = tg.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return c.infer(name, [i]).as_numpy("OUTPUT0")


def test_unary_raw_contents_spread_over_both_replicas(cluster):
    gw, a, b = cluster
    c = tg.InferenceServerClient(gw.grpc_url)
    for k in range(20):
        x = np.full((1, 4), k, dtype=np.float32)
        assert np.array_equal(ident(c, x), x)
    # P2C over two idle replicas: both took calls (counted by the gateway per upstream)
    m = gw.metrics()
    for r in (a, b):
        assert f'cinfer_gateway_grpc_requests_total{{upstream="127.0.0.1:{r.port}",method="ModelInfer",code="0"}}' in m


def test_unary_typed_contents_and_bytes(cluster):
    gw, _, _ = cluster
    ch = grpc.insecure_channel(gw.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
    req = service_pb2.ModelInferRequest(model_name="identity")
    t = req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 3])
    t.contents.fp32_contents.extend([1.5, 2.5, 3.5])
    resp = stub.ModelInfer(req, timeout=30)
    assert resp.model_name == "identity"
    got = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32)
    assert list(got) == [1.5, 2.5, 3.5]
    c = tg.InferenceServerClient(gw.grpc_url)
    s = tg.InferInput("INPUT0", [1, 2], "BYTES")
    s.set_data_from_numpy(np.array([[b"ab", b"\x00\xffz"]], dtype=np.object_))
    out = c.infer("identity_string", [s]).as_numpy("OUTPUT0")
    assert out.tolist() == [[b"ab", b"\x00\xffz"]]
    ch.close()


def test_server_rpcs_and_health_service(cluster):
    gw, _, _ = cluster
    c = tg.InferenceServerClient(gw.grpc_url)
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("identity") and not c.is_model_ready("no_such_model")
    md = c.get_model_metadata("identity")
    assert md.name == "identity" and md.inputs[0].name == "INPUT0"
    assert c.get_server_metadata().name
    with pytest.raises(InferenceServerException) as e:  # model-config: not a public group
        c.get_model_config("identity")
    assert "PERMISSION_DENIED" in str(e.value.status()) and "model-config" in e.value.message()
    cfg = c.get_model_config("identity", headers={"authorization": f"Bearer {ADMIN}"})
    assert cfg.config.name == "identity"
    ch = grpc.insecure_channel(gw.grpc_url)
    check = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                           response_deserializer=lambda b: b)
    assert check(b"", timeout=10) == b"\x08\x01"  # SERVING
    ch.close()


def test_unknown_model_and_malformed_message(cluster):
    gw, _, _ = cluster
    c = tg.InferenceServerClient(gw.grpc_url)
    with pytest.raises(InferenceServerException) as e:
        ident(c, np.zeros((1, 2), dtype=np.float32), "no_such_model")
    assert "StatusCode.NOT_FOUND" in str(e.value.status()) and "no_such_model" in e.value.message()
    ch = grpc.insecure_channel(gw.grpc_url)
    infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=lambda b: b,
                           response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        infer(b"\x0a\x7fabc", timeout=10)  # field 1 announces 127 bytes, 3 follow
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed" in e.value.details()
    ch.close()
    assert np.array_equal(ident(c, np.ones((1, 2), dtype=np.float32)), np.ones((1, 2), dtype=np.float32))


def test_replica_errors_pass_through_with_their_status(cluster):
    gw, a, _ = cluster
    c = tg.InferenceServerClient(gw.grpc_url)
    direct = tg.InferenceServerClient(f"127.0.0.1:{a.grpc_port}")
    bad = tg.InferInput("INPUT0", [1, 3], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.int32))
    errs = []
    for cl in (direct, c):
        with pytest.raises(InferenceServerException) as e:
            cl.infer("identity", [bad])
        errs.append((str(e.value.status()), e.value.message()))
    assert errs[0] == errs[1], errs  # the replica's status and message, unchanged
    assert "INVALID_ARGUMENT" in errs[1][0] and "INT32" in errs[1][1]


def test_llm_stream_token_by_token_stays_on_one_replica(cluster):
    gw, a, b = cluster
    c = tg.InferenceServerClient(gw.grpc_url)
    q = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    i = tg.InferInput("text_input", [1], "BYTES")
    i.set_data_from_numpy(np.array([b"The capital of France is"], dtype=np.object_))
    c.async_stream_infer(LLM, [i], request_id="s1", parameters={"max_tokens": 8, "temperature": 0.0,
                                                                  "stream": True},
                         enable_empty_final_response=True)
    pieces = []
    while True:
        r, e = q.get(timeout=120)
        assert e is None, e
        resp = r.get_response()
        assert resp.id == "s1"
        final = resp.parameters["triton_final_response"].bool_param
        out = r.as_numpy("text_output")
        if out is not None:
            pieces.append(out[0].decode())
        if final:
            break
    c.stop_stream()
    assert len(pieces) >= 2, pieces
    # the whole stream was one call on one upstream
    m = gw.metrics()
    n = [ln for ln in m.splitlines() if 'method="ModelStreamInfer",code="0"' in ln]
    assert len(n) == 1 and n[0].endswith(" 1"), n


def test_control_rpcs_need_an_operator_credential(cluster):
    gw, a, b = cluster
    c = tg.InferenceServerClient(gw.grpc_url)
    for call in (lambda: c.unload_model("identity_string"), lambda: c.load_model("identity_string"),
                 lambda: c.get_model_repository_index(), lambda: c.get_system_shared_memory_status(),
                 lambda: c.get_log_settings(), lambda: c.get_trace_settings()):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert "PERMISSION_DENIED" in str(e.value.status()), e.value
    # the replicas still serve it
    for r in (a, b):
        assert tg.InferenceServerClient(f"127.0.0.1:{r.grpc_port}").is_model_ready("identity_string")
    # with the admin token the call is forwarded (to one replica) and audited
    idx = c.get_model_repository_index(headers={"authorization": f"Bearer {ADMIN}"})
    assert any(m.name == "identity" for m in idx.models)
    wait_for(lambda: any("audit" in ln and "RepositoryIndex" in ln and "admin-token" in ln for ln in gw.log),
             10, "audit line")
    assert any("audit" in ln and "RepositoryModelUnload" in ln and "anonymous" in ln for ln in gw.log)


def test_operator_key_from_key_file_and_tenant_limits():
    with tempfile.TemporaryDirectory() as d, serve(["identity", "identity_string"]) as r:
        r.wait_ready()
        kfile = os.path.join(d, "keys.txt")
        with open(kfile, "w") as f:
            f.write(key_line("ops", OPERATOR_KEY, "operator", "*") + key_line("t1", TENANT_KEY, "tenant", "identity"))
        with gateway([r], keys=kfile) as gw:
            wait_models(gw, 1, "identity")
            c = tg.InferenceServerClient(f"127.0.0.1:{gw.grpc_port}")
            x = np.ones((1, 2), dtype=np.float32)
            i = tg.InferInput("INPUT0", [1, 2], "FP32")
            i.set_data_from_numpy(x)
            with pytest.raises(InferenceServerException) as e:  # no key
                c.infer("identity", [i])
            assert "UNAUTHENTICATED" in str(e.value.status())
            tenant = {"authorization": f"Bearer {TENANT_KEY}"}
            assert np.array_equal(c.infer("identity", [i], headers=tenant).as_numpy("OUTPUT0"), x)
            s = tg.InferInput("INPUT0", [1, 1], "BYTES")
            s.set_data_from_numpy(np.array([[b"a"]], dtype=np.object_))
            with pytest.raises(InferenceServerException) as e:  # not its model
                c.infer("identity_string", [s], headers=tenant)
            assert "PERMISSION_DENIED" in str(e.value.status()) and "identity_string" in e.value.message()
            with pytest.raises(InferenceServerException) as e:
                c.unload_model("identity", headers=tenant)
            assert "PERMISSION_DENIED" in str(e.value.status())
            ops = {"authorization": f"Bearer {OPERATOR_KEY}"}
            c.unload_model("identity_string", headers=ops)
            rc = tg.InferenceServerClient(f"127.0.0.1:{r.grpc_port}")
            wait_for(lambda: not rc.is_model_ready("identity_string"), 30, "unloaded on the replica")
            wait_for(lambda: any("audit" in ln and "RepositoryModelUnload" in ln and "key:ops" in ln
                                 and "-> 0" in ln for ln in gw.log), 10, "audit line of the unload")


def test_replica_killed_mid_run_fails_no_unary_call():
    a = serve(["identity"]).start()  # killed below: not a context manager (its exit is not 0)
    try:
        _killed_mid_run(a)
    finally:
        a.stop()


def _killed_mid_run(a):
    with serve(["identity"]) as b:
        a.wait_ready()
        b.wait_ready()
        with gateway([a, b], extra=()) as gw:
            wait_models(gw, 2, "identity")
            url = f"127.0.0.1:{gw.grpc_port}"
            done_b = threading.Event()
            results, errors = [], []
            stop = threading.Event()

            def worker(k):
                c = tg.InferenceServerClient(url)
                n = 0
                while not stop.is_set():
                    x = np.full((1, 8), k * 1000 + n, dtype=np.float32)
                    try:
                        out = ident(c, x)
                        results.append(np.array_equal(out, x))
                    except Exception as e:  # noqa: BLE001: every failure is recorded
                        errors.append(repr(e))
                    n += 1
                    if len(results) >= 200:
                        done_b.set()

            ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
            for t in ts:
                t.start()
            wait_for(lambda: len(results) >= 40, 60, "calls before the kill")
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(10)
            before = len(results)
            wait_for(lambda: len(results) >= before + 150, 120, "calls after the kill")
            stop.set()
            for t in ts:
                t.join(30)
            assert not errors, errors[:5]
            assert all(results)
            # calls that met the dead replica were retried on the survivor, not failed (by model, as over HTTP)
            m = re.search(r'cinfer_gateway_retries_total\{upstream="%s",model="identity"\} (\d+)' % re.escape(a.hostport),
                          gw.metrics())
            assert m and int(m.group(1)) >= 1, gw.metrics()
            # the gateway took the dead replica out; calls go to the survivor
            wait_for(lambda: not gw.replica(a.hostport)["state"] == "healthy", 20, "killed replica out")


def test_bad_frames_at_the_gateway(cluster):
    gw, _, _ = cluster
    for bad in ("garbage", "no_preface", "data_on_stream_0"):
        s = socket.create_connection(("127.0.0.1", gw.grpc_port), timeout=30)
        if bad == "no_preface":
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        else:
            s.sendall(PREFACE + frame(4, 0, 0, b""))
            s.sendall(b"\xff" * 64 if bad == "garbage" else frame(0, 0, 0, b"abc"))
        frames = read_frames(s, lambda fs: any(f[0] == 7 for f in fs))
        if bad != "no_preface":
            assert any(f[0] == 7 for f in frames), frames  # GOAWAY
        assert s.recv(1) == b""
        s.close()
    # a truncated message then END_STREAM: INTERNAL / INVALID_ARGUMENT, the connection lives on
    s = socket.create_connection(("127.0.0.1", gw.grpc_port), timeout=30)
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    s.sendall(frame(1, 4, 1, req_headers(b"/inference.GRPCInferenceService/ModelInfer")) +
              frame(0, 1, 1, b"\x00\x00\x00\x03\xe8" + b"\x0a" * 10))
    s.sendall(frame(1, 4, 3, req_headers(LIVE)) + frame(0, 1, 3, b"\x00\x00\x00\x00\x00"))
    frames = read_frames(s, lambda fs: any(f[2] == 3 and f[1] & 1 for f in fs) and
                         any(f[2] == 1 and f[1] & 1 for f in fs))
    assert b"".join(f[3] for f in frames if f[0] == 0 and f[2] == 3) == b"\x00\x00\x00\x00\x02\x08\x01"
    assert not any(f[2] == 1 and f[0] == 0 for f in frames)  # stream 1: trailers only
    s.close()
    c = tg.InferenceServerClient(gw.grpc_url)
    assert np.array_equal(ident(c, np.ones((1, 2), dtype=np.float32)), np.ones((1, 2), dtype=np.float32))


def test_tls_listener_negotiates_h2_by_alpn():
    from test_security import make_certs
    d = make_certs()
    with serve(["identity"]) as r:
        r.wait_ready()
        with gateway([r], extra=["--tls-cert", os.path.join(d, "srv.pem"),
                                 "--tls-key", os.path.join(d, "srv.key")]) as gw:
            c = tg.InferenceServerClient(f"localhost:{gw.grpc_port}", ssl=True,
                                         root_certificates=os.path.join(d, "ca.pem"))
            wait_for(lambda: ready(c, "identity"), 30, "identity ready through the gateway")
            x = np.arange(6, dtype=np.float32).reshape(1, 6)
            assert np.array_equal(ident(c, x), x)
            assert c.is_server_ready()
            # plaintext h2c on the TLS port: refused, the listener unharmed
            s = socket.create_connection(("127.0.0.1", gw.grpc_port), timeout=30)
            s.sendall(PREFACE + frame(4, 0, 0, b""))
            s.settimeout(30)
            try:
                while s.recv(4096):
                    pass
            except ConnectionResetError:
                pass
            s.close()
            assert np.array_equal(ident(c, x), x)


def ready(c, model):
    try:
        return c.is_model_ready(model)
    except InferenceServerException:
        return False
