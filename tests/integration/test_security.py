"""Security of the cluster's front door, as a table against the real binaries
(docs/security.md): restricted API groups at the gateway (control calls without and with
an operator credential), API keys from a hashed key file (401/403, a tenant calling another
tenant's model, per-tenant filtering of /v2/repository/index and /v1/models, a revoked key
after the file changes, a malformed file keeping the old keys), audit lines, and
X-Forwarded-For trusted only from configured proxies. After every table the replica is
checked unharmed (its models still READY, still serving)."""
import hashlib
import json
import os
import tempfile

from cinfer_server import copy_repo
from test_gateway_common import INFER_ID, FakeUpstream, Gateway, replica, request, wait_for

KEYS = {"alice": "alice-secret-1", "bob": "bob-secret-2", "ops": "ops-secret-3"}
ADMIN = "admin-token-4"


def key_line(kid, secret, role, models, extra=""):
    return f"{kid} {hashlib.sha256(secret.encode()).hexdigest()} {role} {models} {extra}\n"


def write_keys(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("# id sha256 role models [rate=R]\n" + "".join(lines))
    os.replace(tmp, path)  # atomic: the gateway never sees half a file


def default_keys():
    return [key_line("alice", KEYS["alice"], "tenant", "identity"),
            key_line("bob", KEYS["bob"], "tenant", "identity_fp32"),
            key_line("ops", KEYS["ops"], "operator", "*")]


def auth(who):
    if who is None:
        return {}
    secret = ADMIN if who == "admin" else KEYS.get(who, who)
    return {"Authorization": f"Bearer {secret}"}


def gw_cfg(upstreams, **auth_section):
    return {"health": {"interval_ms": 100, "timeout_ms": 100, "healthy_threshold": 1,
                       "unhealthy_threshold": 1},
            "upstreams": {"models_interval_ms": 200, "static": upstreams},
            "admin_token": ADMIN, "auth": auth_section}


def models_ready(port):
    code, _, body = request(port, "POST", "/v2/repository/index", {"ready": True})
    assert code == 200, body
    return sorted(m["name"] for m in json.loads(body))


# (who, method, path, body, expected status, text the answer must contain)
# who: None (no credential), a key id, "admin" (the admin token) or a wrong secret.
GROUP_TABLE = [
    # the public groups: health, metadata, inference, on the tenant's own models
    ("alice", "GET", "/v2/health/ready", None, 200, ""),
    ("alice", "GET", "/v2/models/identity/ready", None, 200, ""),
    ("alice", "GET", "/v2", None, 200, "cinfer"),
    ("alice", "GET", "/v2/models/identity", None, 200, "INPUT0"),
    ("alice", "POST", "/v2/models/identity/infer", INFER_ID, 200, "OUTPUT0"),
    ("bob", "POST", "/v2/models/identity_fp32/infer", INFER_ID, 200, "OUTPUT0"),
    # 401: no key, a wrong key, not a bearer
    (None, "POST", "/v2/models/identity/infer", INFER_ID, 401, "missing API key"),
    ("wrong-secret", "POST", "/v2/models/identity/infer", INFER_ID, 401, "unknown API key"),
    (None, "GET", "/v2/health/ready", None, 401, "missing API key"),
    # a tenant calling another tenant's model
    ("bob", "POST", "/v2/models/identity/infer", INFER_ID, 403, "API key 'bob' may not use model 'identity'"),
    ("alice", "POST", "/v2/models/identity_fp32/infer", INFER_ID, 403, "model 'identity_fp32'"),
    ("alice", "GET", "/v2/models/identity_fp32", None, 403, "model 'identity_fp32'"),
    ("alice", "POST", "/v2/models//identity_fp32/infer", INFER_ID, 403, "model 'identity_fp32'"),
    ("alice", "POST", "/v2/models/identity%5ffp32/infer", INFER_ID, 403, "model 'identity_fp32'"),
    # control groups need an operator credential, whatever the tenant's models
    (None, "POST", "/v2/repository/models/identity/unload", None, 401, "missing API key"),
    ("alice", "POST", "/v2/repository/models/identity/unload", None, 403, "API group 'model-repository'"),
    ("alice", "POST", "/v2/repository//models/identity/%75nload", None, 403, "'model-repository'"),
    ("alice", "GET", "/v2/models/identity/config", None, 403, "API group 'model-config'"),
    ("alice", "GET", "/v2/models/stats", None, 403, "API group 'statistics'"),
    ("alice", "GET", "/v2/models/identity/stats", None, 403, "'statistics'"),
    ("alice", "POST", "/v2/trace/setting", {}, 403, "API group 'trace'"),
    ("alice", "POST", "/v2/logging", {}, 403, "API group 'logging'"),
    ("alice", "POST", "/v2/systemsharedmemory/region/r/register", {}, 403, "'shared-memory'"),
    ("alice", "POST", "/v2/cudasharedmemory/region/r/register", {}, 403, "'shared-memory'"),
    ("alice", "GET", "/v2/no/such/route", None, 403, "not a known API route"),
    # an operator key and the admin token pass every group (answered by the replica)
    ("ops", "GET", "/v2/models/identity/config", None, 200, "identity"),
    ("admin", "GET", "/v2/models/stats", None, 200, "model_stats"),
    ("ops", "GET", "/v2/no/such/route", None, 404, ""),
    ("ops", "POST", "/v2/repository/models/identity_fp32/unload", None, 200, ""),
    ("admin", "POST", "/v2/repository/models/identity_fp32/load", None, 200, ""),
]


def test_restricted_groups_keys_and_tenants_through_the_gateway():
    repo = copy_repo(["identity", "identity_fp32"])
    kdir = tempfile.mkdtemp(prefix="cinfer-keys-")
    kfile = os.path.join(kdir, "keys.txt")
    write_keys(kfile, default_keys())
    with replica(repo, control=True) as r:
        r.wait_ready()
        with Gateway(gw_cfg([r.hostport], keys_file=kfile, reload_interval_ms=50)) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(r.hostport)["models"], what="model discovery")
            for who, method, path, body, want, text in GROUP_TABLE:
                code, h, b = request(gw.port, method, path, body, headers=auth(who))
                assert code == want, (who, method, path, code, b)
                assert text.encode() in b, (who, path, b)
                if code == 401:
                    assert h["www-authenticate"].startswith("Bearer"), h
                if code in (401, 403):
                    assert json.loads(b)["error"], b
            # refused control calls never reached the replica: both models still READY
            assert models_ready(r.port) == ["identity", "identity_fp32"]
            wait_for(lambda: "identity_fp32" in gw.replica(r.hostport)["models"], 10,
                     "identity_fp32 rediscovered after its reload")

            # listings are filtered per tenant; operators see everything
            for who, want in [("alice", ["identity"]), ("bob", ["identity_fp32"]),
                              ("ops", ["identity", "identity_fp32"])]:
                code, _, b = request(gw.port, "POST", "/v2/repository/index", {}, headers=auth(who))
                assert code == 200, b
                assert sorted(m["name"] for m in json.loads(b)) == want, (who, b)

            # audit: one line per control action, the key id and never the secret
            log = "".join(gw.log)
            lines = [ln for ln in gw.log if "audit" in ln]
            assert any("key:ops" in ln and "/v2/repository/models/identity_fp32/unload" in ln
                       and "200" in ln for ln in lines), lines
            assert any("key:alice" in ln and "unload" in ln and "403" in ln for ln in lines), lines
            assert any("admin-token" in ln and "/v2/models/stats" in ln for ln in lines), lines
            assert not any("/infer" in ln for ln in lines), lines  # inference is not audited
            for secret in list(KEYS.values()) + [ADMIN]:
                assert secret not in log

            # the key file changes: alice is revoked, carol is added
            write_keys(kfile, default_keys()[1:] + [key_line("carol", "carol-secret", "tenant", "*")])
            wait_for(lambda: request(gw.port, "POST", "/v2/models/identity/infer", INFER_ID,
                                     headers=auth("alice"))[0] == 401, 10, "alice revoked")
            code, _, b = request(gw.port, "POST", "/v2/models/identity/infer", INFER_ID,
                                 headers=auth("carol-secret"))
            assert code == 200, b
            # a malformed file keeps the keys in force and names file and line
            with open(kfile, "a") as f:
                f.write("dave nothex tenant *\n")
            wait_for(lambda: any("keys.txt:5: sha256" in ln for ln in gw.log), 10,
                     "the reload error naming file:line")
            code, _, b = request(gw.port, "POST", "/v2/models/identity_fp32/infer", INFER_ID,
                                 headers=auth("bob"))
            assert code == 200, b
        # the replica is unharmed
        assert models_ready(r.port) == ["identity", "identity_fp32"]
        code, _, _ = request(r.port, "POST", "/v2/models/identity/infer", INFER_ID)
        assert code == 200


def test_without_a_key_file_only_the_control_groups_are_closed():
    repo = copy_repo(["identity"])
    with replica(repo) as r:
        r.wait_ready()
        with Gateway(gw_cfg([r.hostport])) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(r.hostport)["models"], what="model discovery")
            rows = [
                (None, "POST", "/v2/models/identity/infer", INFER_ID, 200),
                (None, "GET", "/v2/models/identity", None, 200),
                # the report: an anonymous unload through the gateway
                (None, "POST", "/v2/repository/models/identity/unload", None, 403),
                (None, "POST", "/v2/repository/index", {}, 403),
                (None, "GET", "/v2/models/identity/config", None, 403),
                # an unknown bearer is not an operator (and without keys not an error)
                ("not-the-token", "POST", "/v2/repository/models/identity/unload", None, 403),
                ("not-the-token", "POST", "/v2/models/identity/infer", INFER_ID, 200),
                ("admin", "POST", "/v2/repository/index", {}, 200),
            ]
            for who, method, path, body, want in rows:
                code, _, b = request(gw.port, method, path, body, headers=auth(who))
                assert code == want, (who, path, code, b)
            # the 403 names the group
            _, _, b = request(gw.port, "POST", "/v2/repository/models/identity/unload")
            assert "API group 'model-repository'" in json.loads(b)["error"]
        assert models_ready(r.port) == ["identity"]


def test_openai_model_list_is_filtered_per_tenant():
    kdir = tempfile.mkdtemp(prefix="cinfer-keys-")
    kfile = os.path.join(kdir, "keys.txt")
    write_keys(kfile, [key_line("alice", KEYS["alice"], "tenant", "llm-a,fake"),
                       key_line("ops", KEYS["ops"], "operator", "*")])
    up = FakeUpstream("ok", openai_models=["llm-a", "llm-b", "llm-c"])
    try:
        with Gateway(gw_cfg([up.hostport], keys_file=kfile)) as gw:
            gw.wait_ready()
            wait_for(lambda: len(gw.replica(up.hostport)["models"]) > 1, what="model discovery")
            code, _, b = request(gw.port, "GET", "/v1/models", headers=auth("alice"))
            assert code == 200, b
            assert [m["id"] for m in json.loads(b)["data"]] == ["llm-a"]
            code, _, b = request(gw.port, "GET", "/v1/models", headers=auth("ops"))
            assert [m["id"] for m in json.loads(b)["data"]] == ["llm-a", "llm-b", "llm-c"]
            # the body names the model: another tenant's is refused before any replica sees it
            hits = up.inference_hits
            code, _, b = request(gw.port, "POST", "/v1/chat/completions",
                                 {"model": "llm-b", "messages": []}, headers=auth("alice"))
            assert code == 403 and b"model 'llm-b'" in b, b
            code, _, b = request(gw.port, "POST", "/v1/completions",
                                 b'{"model":"llm-a","model":"llm-b","prompt":"x"}',
                                 headers={**auth("alice"), "Content-Type": "application/json"})
            assert code == 400 and b"more than once" in b, b
            code, _, b = request(gw.port, "POST", "/v1/completions", {"prompt": "x"},
                                 headers=auth("alice"))
            assert code == 403 and b"names none" in b, b
            assert up.inference_hits == hits
            code, _, b = request(gw.port, "POST", "/v1/completions", {"model": "llm-a", "prompt": "x"},
                                 headers=auth("alice"))
            assert code == 200, b
    finally:
        up.close()


def test_x_forwarded_for_counts_only_from_trusted_proxies():
    """The client identity keys the rate limit: one request per 1000 s, no burst. From an
    untrusted peer a forged X-Forwarded-For does not make a new client; behind a trusted
    proxy (here: loopback) each forwarded address is its own client."""
    up = FakeUpstream("ok")
    try:
        for trusted, want_second in [([], 429), (["127.0.0.0/8"], 200)]:
            cfg = gw_cfg([up.hostport], trusted_proxies=trusted)
            cfg["rate_limit"] = {"rate": 0.001, "burst": 0, "nodelay": True}
            with Gateway(cfg) as gw:
                gw.wait_ready()
                wait_for(lambda: gw.replica(up.hostport)["models"], what="model discovery")
                code, _, b = request(gw.port, "POST", "/v2/models/fake/infer", {},
                                     headers={"X-Forwarded-For": "198.51.100.1"})
                assert code == 200, b
                code, _, b = request(gw.port, "POST", "/v2/models/fake/infer", {},
                                     headers={"X-Forwarded-For": "198.51.100.2"})
                assert code == want_second, (trusted, code, b)
                # a forged entry left of what the trusted proxy appended changes nothing
                code, _, _ = request(gw.port, "POST", "/v2/models/fake/infer", {},
                                     headers={"X-Forwarded-For": "203.0.113.9, 198.51.100.1"})
                assert code == 429
    finally:
        up.close()


def test_bad_security_config_names_the_field():
    import subprocess
    from test_gateway_common import BIN
    kdir = tempfile.mkdtemp(prefix="cinfer-keys-")
    kfile = os.path.join(kdir, "keys.txt")
    with open(kfile, "w") as f:
        f.write(key_line("a", "s", "tenant", "*") + "b 00 tenant *\n")
    rows = [(["--keys-file", kfile], "keys.txt:2: sha256: want 64 hex digits"),
            (["--keys-file", kdir + "/missing"], "missing: No such file"),
            (["--trusted-proxy", "10.0.0.0/99"], "--trusted-proxy: '10.0.0.0/99' is not an address"),
            (["--tls-cert", kfile, "--tls-key", kfile], "tls: certificate " + kfile),
            (["--tls-cert", kfile], "cert_file and key_file go together"),
            (["--upstream-tls-ca", kdir + "/no-ca.pem"], "tls: CA file " + kdir + "/no-ca.pem")]
    for args, want in rows:
        p = subprocess.run([BIN, "gateway", "--check-config", "--upstream", "127.0.0.1:1", *args],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, p
        assert want in p.stderr, p.stderr


# ---- TLS ------------------------------------------------------------------------------

import http.client  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import ssl  # noqa: E402
import subprocess  # noqa: E402


def openssl(*args, cwd):
    p = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def make_certs():
    """Generated at test time (never committed): a CA, a server certificate for
    127.0.0.1/localhost, the same key with an expired certificate, a client certificate
    (mutual TLS) and a second, unrelated CA."""
    d = tempfile.mkdtemp(prefix="cinfer-tls-")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    for ca in ("ca", "other"):
        openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                "-subj", f"/CN=cinfer test {ca}", cwd=d)
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("srv", "client"):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "ext", cwd=d)
    with open(os.path.join(d, "index.txt"), "w"):
        pass
    with open(os.path.join(d, "serial"), "w") as f:
        f.write("01\n")
    with open(os.path.join(d, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca=d\n[d]\ndatabase=index.txt\nnew_certs_dir=.\nserial=serial\n"
                "default_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n")
    openssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
            "-in", "srv.csr", "-out", "expired.pem", "-startdate", "20200101000000Z",
            "-enddate", "20200102000000Z", "-extfile", "ext", "-notext", cwd=d)
    # the files the gateway serves, swapped in place to test reloads
    shutil.copy(os.path.join(d, "srv.pem"), os.path.join(d, "live.pem"))
    return d


def ctx(cafile):
    return ssl.create_default_context(cafile=cafile)


def https(port, method, path, body=None, headers=None, cafile=None, conn=None):
    own = conn is None
    c = conn or http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx(cafile))
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        if own:
            c.close()


class TlsGateway(Gateway):
    def __init__(self, config, cafile, args=()):
        super().__init__(config, args)
        self.cafile = cafile

    def get(self, path):
        try:
            return https(self.port, "GET", path, cafile=self.cafile)
        except (OSError, ssl.SSLError) as e:
            return 0, str(e).encode()

    def wait_ready(self, timeout=20):
        wait_for(lambda: self.get("/readyz")[0] == 200, timeout, "gateway /readyz over TLS")

    def status(self):
        code, body = self.get("/status.json")
        assert code == 200, body
        return json.loads(body)


def tls_section(d, **extra):
    return {"cert_file": os.path.join(d, "live.pem"), "key_file": os.path.join(d, "srv.key"), **extra}


def closed_without_answer(sock, timeout=30):
    """True when the peer closes the connection (EOF or reset) without sending HTTP."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(4096)
    except ConnectionResetError:
        return True
    return data == b"" or not data.startswith(b"HTTP/")


def test_tls_listener_table():
    d = make_certs()
    ca, other = os.path.join(d, "ca.pem"), os.path.join(d, "other.pem")
    kdir = tempfile.mkdtemp(prefix="cinfer-keys-")
    kfile = os.path.join(kdir, "keys.txt")
    write_keys(kfile, default_keys())
    repo = copy_repo(["identity"])
    with replica(repo) as r:
        r.wait_ready()
        cfg = gw_cfg([r.hostport], keys_file=kfile)
        cfg["tls"] = tls_section(d)
        with TlsGateway(cfg, ca) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(r.hostport)["models"], what="model discovery")

            def serving():
                try:
                    return https(gw.port, "POST", "/v2/models/identity/infer", INFER_ID,
                                 headers=auth("alice"), cafile=ca)[0] == 200
                except ssl.SSLError:
                    return False

            # a client that trusts another CA refuses the gateway's certificate
            try:
                https(gw.port, "GET", "/v2/health/ready", headers=auth("alice"), cafile=other)
                raise AssertionError("a client with the wrong CA accepted the certificate")
            except ssl.SSLCertVerificationError as e:
                assert "certificate verify failed" in str(e)
            assert serving()
            # a plaintext request on the TLS port: closed without an HTTP answer
            s = socket.create_connection(("127.0.0.1", gw.port))
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            assert closed_without_answer(s)
            s.close()
            assert serving()
            # slowloris: a TLS handshake that never finishes is closed (header timeout)
            s = socket.create_connection(("127.0.0.1", gw.port))
            s.sendall(b"\x16\x03\x01\x00\xff\x01")  # the first bytes of a ClientHello, then nothing
            assert closed_without_answer(s)
            s.close()
            assert serving()
            # a keep-alive connection opened now survives the certificate change below
            keep = http.client.HTTPSConnection("127.0.0.1", gw.port, timeout=30, context=ctx(ca))
            assert https(gw.port, "GET", "/v2/health/ready", headers=auth("alice"), conn=keep)[0] == 200
            # the certificate file changes to an expired one: new handshakes fail...
            shutil.copy(os.path.join(d, "expired.pem"), os.path.join(d, "live.pem.tmp"))
            os.replace(os.path.join(d, "live.pem.tmp"), os.path.join(d, "live.pem"))

            def expired_seen():
                try:
                    https(gw.port, "GET", "/v2/health/ready", cafile=ca)
                    return False
                except ssl.SSLCertVerificationError as e:
                    return "certificate has expired" in str(e)
            wait_for(expired_seen, 15, "the expired certificate to be served")
            # ... while the connection established before keeps working
            assert https(gw.port, "POST", "/v2/models/identity/infer", INFER_ID,
                         headers=auth("alice"), conn=keep)[0] == 200
            keep.close()
            shutil.copy(os.path.join(d, "srv.pem"), os.path.join(d, "live.pem.tmp"))
            os.replace(os.path.join(d, "live.pem.tmp"), os.path.join(d, "live.pem"))
            wait_for(serving, 15, "the valid certificate to be served again")

            # tritonclient over HTTPS with a key
            import gevent.ssl
            import numpy as np
            import tritonclient.http as th
            c = th.InferenceServerClient(
                f"127.0.0.1:{gw.port}", ssl=True,
                ssl_context_factory=lambda: gevent.ssl.create_default_context(cafile=ca))
            h = auth("alice")
            assert c.is_server_ready(headers=h)
            inp = th.InferInput("INPUT0", [1, 4], "FP32")
            inp.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32))
            res = c.infer("identity", [inp], headers=h)
            assert res.as_numpy("OUTPUT0").tolist() == [[1, 2, 3, 4]]
            try:
                c.infer("identity", [inp], headers=auth("bob"))
                raise AssertionError("bob used alice's model")
            except Exception as e:  # tritonclient's InferenceServerException
                assert "may not use model 'identity'" in str(e), e
            c.close()
        assert models_ready(r.port) == ["identity"]


def test_openai_client_over_https_with_a_key():
    import httpx2 as httpx  # the HTTP client this openai release uses
    import openai
    d = make_certs()
    ca = os.path.join(d, "ca.pem")
    kdir = tempfile.mkdtemp(prefix="cinfer-keys-")
    kfile = os.path.join(kdir, "keys.txt")
    write_keys(kfile, [key_line("alice", KEYS["alice"], "tenant", "llm-a")])
    up = FakeUpstream("ok", openai_models=["llm-a", "llm-b"])
    try:
        cfg = gw_cfg([up.hostport], keys_file=kfile)
        cfg["tls"] = tls_section(d)
        with TlsGateway(cfg, ca) as gw:
            gw.wait_ready()
            wait_for(lambda: len(gw.replica(up.hostport)["models"]) > 1, what="model discovery")
            cl = openai.OpenAI(base_url=f"https://127.0.0.1:{gw.port}/v1", api_key=KEYS["alice"],
                               http_client=httpx.Client(verify=ca), max_retries=0)
            assert [m.id for m in cl.models.list()] == ["llm-a"]
            bad = openai.OpenAI(base_url=f"https://127.0.0.1:{gw.port}/v1", api_key="nope",
                                http_client=httpx.Client(verify=ca), max_retries=0)
            try:
                bad.models.list()
                raise AssertionError("an unknown key listed models")
            except openai.AuthenticationError as e:
                assert e.status_code == 401 and "unknown API key" in e.response.text, e.response.text
    finally:
        up.close()


def test_upstream_tls_ca_and_mutual_tls():
    """gateway A -> TLS -> gateway B (TLS listener) -> replica. A verifies B with the CA
    (and, where B requires it, presents a client certificate); with the wrong CA or
    without the client certificate A's checks fail cleanly: the replica is unhealthy, a
    request is answered 503, nothing crashes, B keeps serving."""
    d = make_certs()
    ca = os.path.join(d, "ca.pem")
    repo = copy_repo(["identity"])
    with replica(repo) as r:
        r.wait_ready()
        cfg_b = gw_cfg([r.hostport], public_groups=["health", "metadata", "inference",
                                                    "model-repository"])
        cfg_b["tls"] = tls_section(d, client_ca_file=ca)
        rows = [
            ({"ca_file": ca, "cert_file": os.path.join(d, "client.pem"),
              "key_file": os.path.join(d, "client.key")}, 200),
            ({"ca_file": os.path.join(d, "other.pem"), "cert_file": os.path.join(d, "client.pem"),
              "key_file": os.path.join(d, "client.key")}, "failed: certificate: self-signed certificate in certificate chain"),
            ({"ca_file": ca}, "unhealthy"),                         # no client certificate
        ]
        b = Gateway(cfg_b)
        b.start()
        try:
            for up_tls, want in rows:
                cfg_a = gw_cfg([f"127.0.0.1:{b.port}"])
                cfg_a["upstream_tls"] = up_tls
                with Gateway(cfg_a) as a:
                    want_state = "healthy" if want == 200 else "unhealthy"
                    wait_for(lambda: (a.replica(f"127.0.0.1:{b.port}") or {}).get("state") == want_state,
                             15, f"replica {want_state}")
                    if want == 200:
                        wait_for(lambda: a.replica(f"127.0.0.1:{b.port}")["models"], what="models")
                    code, _, body = request(a.port, "POST", "/v2/models/identity/infer", INFER_ID)
                    if want == 200:
                        assert code == 200, (up_tls, code, body)
                    else:
                        # never discovered, never used: a clean 404, the reason in the log
                        assert code == 404 and b"not served by any replica" in body, body
                        assert any(want in ln for ln in a.log), "".join(a.log)
        finally:
            assert b.stop() == 0
        assert models_ready(r.port) == ["identity"]


def test_serve_https_and_restricted_api_groups():
    """`cinfer serve` itself: HTTPS on the HTTP port (tritonclient with ssl=True, a plaintext
    request closed), and Triton's --http-restricted-api: the model-repository and statistics
    groups need the header, health and inference do not; a refusal is 403 naming the group,
    a bad flag value fails the start naming the flag."""
    import gevent.ssl
    import numpy as np
    import tritonclient.http as th
    from cinfer_server import BIN, Server as CinferServer
    d = make_certs()
    ca = os.path.join(d, "ca.pem")
    repo = copy_repo(["identity"])
    srv = CinferServer(repo, args=["--tls-cert", os.path.join(d, "srv.pem"), "--tls-key",
                                   os.path.join(d, "srv.key"), "--model-control-mode", "explicit",
                                   "--load-model", "identity",
                                   "--http-restricted-api", "model-repository,statistics:admin-key=s3cret"])
    with srv:
        wait_for(lambda: https(srv.port, "GET", "/v2/health/ready", cafile=ca)[0] == 200, what="ready")
        c = th.InferenceServerClient(f"127.0.0.1:{srv.port}", ssl=True,
                                     ssl_context_factory=lambda: gevent.ssl.create_default_context(cafile=ca))
        inp = th.InferInput("INPUT0", [1, 4], "FP32")
        x = np.array([[1, 2, 3, 4]], dtype=np.float32)
        inp.set_data_from_numpy(x)
        assert np.array_equal(c.infer("identity", [inp]).as_numpy("OUTPUT0"), x)
        rows = [  # method, path, headers, expected status, text in the body
            ("POST", "/v2/repository/index", {}, 403, "model-repository"),
            ("POST", "/v2/repository/models/identity/unload", {}, 403, "model-repository"),
            ("GET", "/v2/models/identity/stats", {}, 403, "statistics"),
            ("GET", "/v2/models/identity/stats", {"admin-key": "wrong"}, 403, "statistics"),
            ("POST", "/v2/repository/index", {"admin-key": "s3cret"}, 200, "identity"),
            ("GET", "/v2/models/identity/stats", {"admin-key": "s3cret"}, 200, "identity"),
            ("GET", "/v2/models/identity", {}, 200, "identity"),
        ]
        for method, path, headers, want, text in rows:
            code, body = https(srv.port, method, path, headers=headers, cafile=ca)
            assert code == want and text.encode() in body, (method, path, headers, code, body)
        # the unload was refused: the model still serves
        assert np.array_equal(c.infer("identity", [inp]).as_numpy("OUTPUT0"), x)
        c.close()
        # plain HTTP on the TLS port gets no answer
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert closed_without_answer(s)
    bad = subprocess.run([BIN, "serve", "--model-repository", repo, "--http-port", "0",
                          "--http-restricted-api", "nosuchgroup:k=v"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "--http-restricted-api" in bad.stderr + bad.stdout, bad


def test_token_budget_per_key_from_usage():
    # alice may spend 150 LLM tokens a minute: each answer's usage (prompt + completion) is
    # taken from her budget; once it is spent she gets 429 with Retry-After at once, while
    # bob (no budget) is unaffected. The tokens charged are what the answers reported.
    repo = copy_repo(["smollm2"])
    kdir = tempfile.mkdtemp(prefix="cinfer-keys-")
    kfile = os.path.join(kdir, "keys.txt")
    write_keys(kfile, [key_line("alice", KEYS["alice"], "tenant", "smollm2", "tpm=150"),
                       key_line("bob", KEYS["bob"], "tenant", "smollm2")])
    with replica(repo) as rep:
        rep.wait_ready()
        with Gateway(gw_cfg([f"127.0.0.1:{rep.port}"], keys_file=kfile)) as gw:
            gw.wait_ready()
            wait_for(lambda: "smollm2" in gw.replica(f"127.0.0.1:{rep.port}")["models"], what="model discovery")
            body = {"model": "smollm2", "prompt": "Count: 1, 2, 3,", "max_tokens": 16, "temperature": 0,
                    "ignore_eos": True}
            used, answers = 0, 0
            for _ in range(20):
                code, hdrs, b = request(gw.port, "POST", "/v1/completions", body, headers=auth("alice"))
                if code == 429:
                    break
                assert code == 200, b
                used += json.loads(b)["usage"]["total_tokens"]
                answers += 1
            assert code == 429, "the budget was never enforced"
            assert int(hdrs["retry-after"]) >= 1
            assert b"token budget of key 'alice' spent" in b, b
            assert used >= 150 and answers >= 3, (used, answers)  # admitted while the budget was above zero
            # streamed without include_usage: one token per chunk; bob has no budget
            code, _, b = request(gw.port, "POST", "/v1/completions", {**body, "stream": True}, headers=auth("bob"))
            assert code == 200 and b.count(b"data: {") >= 16
            metrics = request(gw.port, "GET", "/metrics")[2].decode()
            charged = [float(l.split()[-1]) for l in metrics.splitlines()
                       if l.startswith('cinfer_gateway_tokens_total{key="alice"}')]
            assert charged == [float(used)], (charged, used)
            assert 'cinfer_gateway_token_limited_total{model="smollm2"} 1' in metrics
