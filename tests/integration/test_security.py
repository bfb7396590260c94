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
    with replica(repo) as r:
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
            (["--trusted-proxy", "10.0.0.0/99"], "--trusted-proxy: '10.0.0.0/99' is not an address")]
    for args, want in rows:
        p = subprocess.run([BIN, "gateway", "--check-config", "--upstream", "127.0.0.1:1", *args],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, p
        assert want in p.stderr, p.stderr
