"""The gRPC endpoint's front door against the real binary, with tritonclient.grpc:
Triton's --grpc-restricted-protocol (the HTTP endpoint's API groups and classifier, a refused
call is PERMISSION_DENIED naming the group) and TLS (--grpc-use-ssl, --grpc-server-cert/-key,
--grpc-root-cert, --grpc-use-ssl-mutual: ALPN h2, the HTTP side's OpenSSL code with its
certificate reload). Certificates are generated at test time (test_security.make_certs)."""
import os
import shutil
import socket
import ssl
import subprocess
import time

import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

from cinfer_server import BIN, Server, copy_repo
from test_security import make_certs


def grpc_error(fn):
    with pytest.raises(InferenceServerException) as e:
        fn()
    return e.value.status(), e.value.message()


def infer_ok(c, headers=None):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    i = tg.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    assert np.array_equal(c.infer("identity", [i], headers=headers).as_numpy("OUTPUT0"), x)


# ---- restricted protocols ------------------------------------------------------------------

@pytest.fixture(scope="module")
def restricted():
    repo = copy_repo(["identity", "identity_int32"])
    args = ["--model-control-mode", "explicit", "--load-model", "identity",
            "--grpc-restricted-protocol", "model-repository,shared-memory:admin-key=s3cret",
            "--grpc-restricted-protocol", "inference:infer-key=abc"]
    with Server(repo, args) as s:
        s.wait_ready()
        s.grpc_url = f"127.0.0.1:{s.grpc_port}"
        yield s


ADMIN = {"admin-key": "s3cret"}


def test_restricted_groups_need_their_header(restricted):
    c = tg.InferenceServerClient(restricted.grpc_url)
    # unrestricted groups answer without a header
    assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("identity")
    assert c.get_server_metadata().name == "cinfer"
    assert c.get_model_config("identity").config.name == "identity"
    # model-repository: refused without the header, with a wrong value, with another group's
    for h in (None, {"admin-key": "wrong"}, {"infer-key": "abc"}):
        code, msg = grpc_error(lambda: c.get_model_repository_index(headers=h))
        assert code == "StatusCode.PERMISSION_DENIED", (h, code, msg)
        assert msg == "This API is restricted, expecting header 'admin-key' (API group 'model-repository')"
    code, msg = grpc_error(lambda: c.unload_model("identity"))
    assert code == "StatusCode.PERMISSION_DENIED" and "'model-repository'" in msg
    assert c.is_model_ready("identity")  # the refused unload changed nothing
    names = [m.name for m in c.get_model_repository_index(headers=ADMIN).models]
    assert "identity" in names and "identity_int32" in names
    c.load_model("identity_int32", headers=ADMIN)
    assert c.is_model_ready("identity_int32")
    # shared-memory shares the admin header; the CUDA RPCs are in the same group
    code, msg = grpc_error(lambda: c.get_system_shared_memory_status())
    assert code == "StatusCode.PERMISSION_DENIED" and "'shared-memory'" in msg
    code, msg = grpc_error(lambda: c.get_cuda_shared_memory_status())
    assert code == "StatusCode.PERMISSION_DENIED" and "'shared-memory'" in msg
    assert len(c.get_system_shared_memory_status(headers=ADMIN).regions) == 0
    # inference has its own header
    code, msg = grpc_error(lambda: infer_ok(c))
    assert code == "StatusCode.PERMISSION_DENIED"
    assert msg == "This API is restricted, expecting header 'infer-key' (API group 'inference')"
    infer_ok(c, {"infer-key": "abc"})
    c.close()


def test_restricted_streaming_call_is_refused(restricted):
    import queue
    c = tg.InferenceServerClient(restricted.grpc_url)
    got = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        i = tg.InferInput("INPUT0", [1, 2], "FP32")
        i.set_data_from_numpy(np.ones((1, 2), np.float32))
        # the call is refused at its headers: the send itself may already see the stream
        # ended; the error always reaches the callback
        try:
            c.async_stream_infer("identity", [i])
        except InferenceServerException as ex:
            assert "no longer in valid state" in ex.message()
        r, e = got.get(timeout=60)
        assert r is None and "PERMISSION_DENIED" in str(e.status()) and "'inference'" in e.message()
    finally:
        c.stop_stream()
    got = queue.Queue()
    c.start_stream(callback=lambda result, error: got.put((result, error)), headers={"infer-key": "abc"})
    try:
        c.async_stream_infer("identity", [i], request_id="s1")
        r, e = got.get(timeout=60)
        assert e is None and r.get_response().id == "s1"
    finally:
        c.stop_stream()
    c.close()


def test_grpc_restrictions_leave_http_alone(restricted):
    """The two flags are separate, as in Triton: HTTP has no restriction here."""
    import urllib.request
    with urllib.request.urlopen(restricted.url + "/v2/repository/index", data=b"{}", timeout=30) as r:
        assert r.status == 200


@pytest.mark.parametrize("spec,text", [
    ("nosuchgroup:k=v", "nosuchgroup"),
    ("inference", "GROUP[,GROUP...]:KEY=VALUE"),
    ("inference:k", "KEY=VALUE"),
])
def test_bad_restricted_protocol_flag_is_a_cli_error(spec, text):
    repo = copy_repo(["identity"])
    p = subprocess.run([BIN, "serve", "--model-repository", repo, "--http-port", "0", "--grpc-port", "0",
                        "--grpc-restricted-protocol", spec], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--grpc-restricted-protocol" in p.stderr + p.stdout and text in p.stderr + p.stdout


# ---- TLS -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certs():
    d = make_certs()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def tls_server(certs, mutual=False, cert="live.pem"):
    args = ["--grpc-use-ssl", "true", "--grpc-server-cert", os.path.join(certs, cert),
            "--grpc-server-key", os.path.join(certs, "srv.key"),
            "--grpc-root-cert", os.path.join(certs, "ca.pem")]
    if mutual:
        args += ["--grpc-use-ssl-mutual", "true"]
    s = Server(copy_repo(["identity"]), args)
    return s


def read(certs, name):
    with open(os.path.join(certs, name), "rb") as f:
        return f.read()


def tls_client(s, certs, client_cert=False):
    kw = {}
    if client_cert:
        kw = {"private_key": os.path.join(certs, "client.key"),
              "certificate_chain": os.path.join(certs, "client.pem")}
    return tg.InferenceServerClient(f"127.0.0.1:{s.grpc_port}", ssl=True,
                                    root_certificates=os.path.join(certs, "ca.pem"), **kw)


def handshake(port, alpn=("h2",), cafile=None):
    """A raw TLS handshake: (selected ALPN protocol, the server's certificate, DER)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with ctx.wrap_socket(raw) as t:
            return t.selected_alpn_protocol(), t.getpeercert(binary_form=True)


def der(certs, name):
    return ssl.PEM_cert_to_DER_cert(read(certs, name).decode())


def test_tls_with_tritonclient_and_plaintext_refused(certs):
    with tls_server(certs) as s:
        s.wait_ready()
        c = tls_client(s, certs)
        assert c.is_server_live()
        infer_ok(c)
        # a plaintext client on the TLS port gets no service ...
        p = tg.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        code, _ = grpc_error(lambda: p.is_server_live(client_timeout=10))
        assert code in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
        p.close()
        # ... nor does raw HTTP/2 prior knowledge; the server is unharmed
        with socket.create_connection(("127.0.0.1", s.grpc_port), timeout=30) as raw:
            raw.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\0" * 64)
            raw.settimeout(30)
            try:
                data = raw.recv(4096)
            except ConnectionResetError:
                data = b""
            assert not data.startswith(b"\0\0")  # no HTTP/2 frame came back
        infer_ok(c)
        # ALPN: h2 is selected; a client offering only http/1.1 is refused
        assert handshake(s.grpc_port)[0] == "h2"
        with pytest.raises(ssl.SSLError):
            handshake(s.grpc_port, alpn=("http/1.1",))
        assert c.is_server_ready()
        c.close()


def test_silent_and_slow_handshakes_are_closed(certs):
    """Slowloris on the TLS port: a client that connects and says nothing, or sends half a
    ClientHello, is closed when the handshake time (10 s) is up; others are served meanwhile."""
    with tls_server(certs) as s:
        s.wait_ready()
        silent = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=60)
        slow = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=60)
        slow.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello record
        c = tls_client(s, certs)
        infer_ok(c)
        for sock in (silent, slow):
            try:
                assert sock.recv(4096) == b""  # closed by the server (bounded by the 60 s timeout)
            except ConnectionResetError:
                pass
            sock.close()
        assert c.is_server_live()
        c.close()


def test_mutual_tls_needs_a_client_certificate(certs):
    with tls_server(certs, mutual=True) as s:
        s.wait_ready()
        anon = tls_client(s, certs)
        code, _ = grpc_error(lambda: anon.is_server_live(client_timeout=10))
        assert code in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
        anon.close()
        c = tls_client(s, certs, client_cert=True)
        assert c.is_server_live()
        infer_ok(c)
        c.close()


def test_certificate_is_reloaded_on_change(certs):
    live = os.path.join(certs, "live.pem")
    shutil.copy(os.path.join(certs, "srv.pem"), live)
    with tls_server(certs) as s:
        s.wait_ready()
        c = tls_client(s, certs)
        assert c.is_server_live()
        assert handshake(s.grpc_port)[1] == der(certs, "srv.pem")
        # the same key with another certificate: new handshakes get it (checked at most
        # once a second), the connection already up keeps working
        shutil.copy(os.path.join(certs, "expired.pem"), live)
        deadline = time.monotonic() + 30
        while handshake(s.grpc_port)[1] != der(certs, "expired.pem"):
            assert time.monotonic() < deadline, "the new certificate was never served"
            time.sleep(0.1)
        assert c.is_server_live()
        fresh = tls_client(s, certs)
        code, _ = grpc_error(lambda: fresh.is_server_live(client_timeout=10))  # expired: refused
        assert code in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")
        fresh.close()
        shutil.copy(os.path.join(certs, "srv.pem"), live)
        while handshake(s.grpc_port)[1] != der(certs, "srv.pem"):
            assert time.monotonic() < deadline, "the certificate was never restored"
            time.sleep(0.1)
        fresh = tls_client(s, certs)
        assert fresh.is_server_live()
        fresh.close()
        c.close()


@pytest.mark.parametrize("args,text", [
    (["--grpc-use-ssl", "true"], "--grpc-server-cert"),
    (["--grpc-use-ssl", "maybe"], "is not true or false"),
    (["--grpc-server-cert", "x.pem"], "need --grpc-use-ssl true"),
    (["--grpc-use-ssl-mutual", "true", "--grpc-server-cert", "{d}/srv.pem", "--grpc-server-key",
      "{d}/srv.key"], "--grpc-root-cert"),
    (["--grpc-use-ssl", "1", "--grpc-server-cert", "{d}/nope.pem", "--grpc-server-key", "{d}/srv.key"],
     "nope.pem"),
])
def test_bad_tls_flags_are_cli_errors(certs, args, text):
    repo = copy_repo(["identity"])
    args = [a.format(d=certs) for a in args]
    p = subprocess.run([BIN, "serve", "--model-repository", repo, "--http-port", "0", "--grpc-port", "0",
                        *args], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and text in p.stderr + p.stdout, p.stderr + p.stdout
