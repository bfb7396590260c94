"""/admin with operator keys from the key file (not only the admin token), and one audit
line per control action (who, what, result), refused calls included; a revoked operator
key stops working once the key file changes."""
import hashlib
import json
import os
import tempfile

from test_gateway_common import Gateway, request, wait_for
from cinfer_server import Server

OPS, TENANT = "ops-secret-1", "tenant-secret-1"


def key_line(kid, secret, role, models):
    return f"{kid} {hashlib.sha256(secret.encode()).hexdigest()} {role} {models}\n"


def audit_lines(gw, who, path, status):
    return [ln for ln in gw.log if "gateway: audit:" in ln and f"by {who} -> {status}" in ln and path in ln]


def test_admin_accepts_operator_keys_and_audits_each_action():
    with tempfile.TemporaryDirectory() as d, Server(args=["--model-control-mode", "explicit",
                                                          "--load-model", "identity"]) as r:
        r.wait_ready()
        kfile = os.path.join(d, "keys.txt")
        with open(kfile, "w") as f:
            f.write(key_line("ops", OPS, "operator", "*") + key_line("t1", TENANT, "tenant", "identity"))
        cfg = {"health": {"interval_ms": 100, "timeout_ms": 100, "healthy_threshold": 1,
                          "unhealthy_threshold": 1},
               "upstreams": {"models_interval_ms": 200, "static": [r.hostport]},
               "auth": {"keys_file": kfile, "reload_interval_ms": 50},
               "canary": {"identity": {"variants": [{"name": "a", "weight": 90}, {"name": "b", "weight": 10}]}}}
        with Gateway(cfg) as gw:  # no admin token at all: operator keys only
            gw.wait_ready()
            body = {"weights": {"a": 50, "b": 50}}
            ops = {"Authorization": f"Bearer {OPS}"}
            rows = [  # (headers, expected status, who in the audit line)
                ({}, 401, "anonymous"),
                ({"Authorization": "Bearer nope"}, 401, "unknown-credential"),
                ({"Authorization": f"Bearer {TENANT}"}, 403, "key:t1"),
                (ops, 200, "key:ops"),
            ]
            for headers, want, who in rows:
                code, _, b = request(gw.port, "PUT", "/admin/canary/identity", body, headers=headers)
                assert code == want, (headers, code, b)
                if want == 403:
                    assert b"t1 is not an operator key" in b
                wait_for(lambda: audit_lines(gw, who, "/admin/canary/identity", want), 10,
                         f"audit line for {who}")
            code, _, b = request(gw.port, "GET", "/admin/canary", headers=ops)
            assert code == 200
            weights = json.loads(b)["canary"]["identity"]
            assert weights == {"a": 50, "b": 50}
            # a bad change by an operator: answered 400, audited with its result
            code, _, _ = request(gw.port, "PUT", "/admin/canary/identity", {"weights": {"zz": 1}}, headers=ops)
            assert code == 400
            wait_for(lambda: audit_lines(gw, "key:ops", "/admin/canary/identity", 400), 10, "audit of the 400")
            # the operator key also opens the restricted API groups (audited)
            code, _, _ = request(gw.port, "POST", "/v2/repository/index", {}, headers=ops)
            assert code == 200
            code, _, _ = request(gw.port, "POST", "/v2/repository/index", {},
                                 headers={"Authorization": f"Bearer {TENANT}"})
            assert code == 200  # tenants get the (filtered) listing
            # revoked: the key file loses the operator key
            with open(kfile + ".new", "w") as f:
                f.write(key_line("t1", TENANT, "tenant", "identity"))
            os.replace(kfile + ".new", kfile)
            wait_for(lambda: request(gw.port, "GET", "/admin/canary", headers=ops)[0] == 401, 10,
                     "revoked operator key refused")
