"""cinfer gateway in front of real `cinfer serve` replicas: per-model routing, request ids,
its own endpoints, config errors, admin authentication, streaming pass-through and
upstreams that misbehave (hang, close mid-response, garbage)."""
import json
import os
import subprocess
import tempfile

from cinfer_server import copy_repo
from test_gateway_common import (BIN, INFER_ID, INFER_SIM, FakeUpstream, Gateway, get,
                                 replica, request, wait_for)
import signal
import socket


def health_cfg(**extra):
    cfg = {"health": {"interval_ms": 100, "timeout_ms": 100, "healthy_threshold": 1,
                      "unhealthy_threshold": 1},
           "upstreams": {"models_interval_ms": 200}}
    cfg.update(extra)
    return cfg


def test_routes_each_model_only_to_replicas_that_serve_it():
    repo_a = copy_repo(["identity", "sim_detector"])
    repo_b = copy_repo(["identity"])
    with replica(repo_a) as a, replica(repo_b) as b:
        a.wait_ready()
        b.wait_ready()
        cfg = health_cfg()
        cfg["upstreams"]["static"] = [a.hostport, b.hostport]
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: all(len(r["models"]) > 0 for r in gw.status()["replicas"]),
                     what="model discovery")
            seen_sim, seen_id = set(), set()
            for _ in range(40):
                code, h, body = request(gw.port, "POST", "/v2/models/sim_detector/infer", INFER_SIM)
                assert code == 200, body
                assert json.loads(body)["model_name"] == "sim_detector"
                seen_sim.add(h["x-cinfer-upstream"])
                code, h, body = request(gw.port, "POST", "/v2/models/identity/infer", INFER_ID)
                assert code == 200, body
                assert json.loads(body)["outputs"][0]["data"] == [1.0, 2.0, 3.0, 4.0]
                seen_id.add(h["x-cinfer-upstream"])
            assert seen_sim == {a.hostport}
            assert seen_id == {a.hostport, b.hostport}
            # an explicit version routes on "name@version"
            code, h, _ = request(gw.port, "POST", "/v2/models/sim_detector/versions/1/infer", INFER_SIM)
            assert code == 200 and h["x-cinfer-upstream"] == a.hostport
            code, _, body = request(gw.port, "POST", "/v2/models/sim_detector/versions/7/infer", INFER_SIM)
            assert code == 404 and b"not served by any replica" in body
            code, _, body = request(gw.port, "POST", "/v2/models/nope/infer", INFER_ID)
            assert code == 404
            assert json.loads(body)["error"] == "model 'nope' is not served by any replica"
            # paths without a model go to any healthy replica
            code, _, body = request(gw.port, "GET", "/v2/health/ready")
            assert code == 200
            # request ids: propagated when given, generated otherwise
            code, h, _ = request(gw.port, "POST", "/v2/models/identity/infer", INFER_ID,
                                 headers={"X-Request-Id": "abc-123"})
            assert h["x-request-id"] == "abc-123"
            code, h, _ = request(gw.port, "POST", "/v2/models/identity/infer", INFER_ID)
            assert len(h["x-request-id"]) == 32
            m = gw.metrics()
            assert f'cinfer_gateway_requests_total{{upstream="{a.hostport}",model="sim_detector",variant="",code="200"}}' in m
            assert f'cinfer_gateway_upstream_healthy{{upstream="{b.hostport}"}} 1' in m
            assert "cinfer_gateway_request_duration_seconds_bucket" in m
            for name in ("cinfer_gateway_ejections_total", "cinfer_gateway_retries_total",
                         "cinfer_gateway_rate_limited_total", "cinfer_gateway_shed_total"):
                assert name in m
            code, h, page = request(gw.port, "GET", "/status")
            assert code == 200 and b'http-equiv="refresh"' in page
            assert a.hostport.encode() in page and b"sim_detector" in page
            assert get(gw.port, "/healthz")[0] == 200
            assert get(gw.port, "/nothing")[0] == 404


def run_gateway_cli(*args, config=None):
    path = None
    if config is not None:
        fd, path = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(config)
        args = ("--config", path) + args
    try:
        p = subprocess.run([BIN, "gateway", "--check-config", *args], capture_output=True,
                           text=True, timeout=30)
    finally:
        if path:
            os.unlink(path)
    return p.returncode, p.stderr + p.stdout


def test_bad_config_names_the_key():
    cases = [
        ('{"health": {"interval_ms": -5}}', "health.interval_ms: must be an integer"),
        ('{"health": {"intervall_ms": 5}}', "health.intervall_ms: unknown key"),
        ('{"upstreams": {"static": ["nohost"]}}', "upstreams.static[0].address: 'nohost' is not host:port"),
        ('{"balancer": "fastest"}', "balancer: 'fastest' is not p2c"),
        ('{"upstreams": {"static": ["a:1"]}, "rate_limit": {"burst": 3}}', "rate_limit.rate: missing"),
        ('{"canary": {"m": {"variants": [{"name": "a", "weight": 0}]}}}', "canary.m.variants: the weights sum to 0"),
        ('{"listen": {"port": 70000}}', "listen.port: must be an integer in [0, 65535]"),
        ('{"listen": ', ":1:11: invalid JSON"),
        ('[]', "the top level must be a JSON object"),
        ('{}', "upstreams: none configured"),
    ]
    for text, want in cases:
        rc, out = run_gateway_cli(config=text)
        assert rc == 2, (text, out)
        assert want in out, (text, out)
    rc, out = run_gateway_cli("--upstream", "127.0.0.1:1", "--balancer", "nope")
    assert rc == 2 and "--balancer: 'nope'" in out
    rc, out = run_gateway_cli("--upstream", "127.0.0.1:99999")
    assert rc == 2 and "--upstream: '127.0.0.1:99999' is not host:port" in out
    rc, out = run_gateway_cli("--upstream", "127.0.0.1:1")
    assert rc == 0, out


def test_sse_stream_passes_through_as_it_arrives_and_faulty_upstreams_get_5xx():
    sse = FakeUpstream("sse")
    bad = {m: FakeUpstream(m) for m in ("hang", "close", "garbage")}
    good = FakeUpstream("ok")
    try:
        for name, up in [("sse", sse), ("good", good)] + list(bad.items()):
            cfg = health_cfg(retry={"try_timeout_ms": 500, "request_timeout_ms": 2000})
            cfg["upstreams"]["static"] = [up.hostport]
            with Gateway(cfg) as gw:
                gw.wait_ready()
                wait_for(lambda: gw.replica(up.hostport)["models"], what="models")
                if name == "sse":
                    s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
                    s.sendall(b"POST /v2/models/fake/generate_stream HTTP/1.1\r\nHost: x\r\n"
                              b"Content-Length: 2\r\n\r\n{}")
                    got = b""
                    while b"data: one" not in got:
                        d = s.recv(4096)
                        assert d, got
                        got += d
                    # the first event arrived while the upstream still holds the second
                    assert not sse.release.is_set()
                    assert got.startswith(b"HTTP/1.1 200")
                    assert b"Content-Type: text/event-stream" in got
                    assert b"Transfer-Encoding: chunked" in got
                    sse.release.set()
                    while not got.endswith(b"0\r\n\r\n"):
                        d = s.recv(4096)
                        assert d, got
                        got += d
                    s.close()
                    assert b"data: two" in got
                    continue
                if name == "good":
                    code, _, body = request(gw.port, "POST", "/v2/models/fake/infer", {})
                    assert code == 200 and body == b'{"ok":true}'
                    continue
                code, h, body = request(gw.port, "POST", "/v2/models/fake/infer", {})
                err = json.loads(body)["error"]
                if name == "hang":
                    assert code == 504 and "response timeout" in err, (code, err)
                elif name == "close":
                    assert code == 502 and "closed during response" in err, (code, err)
                else:
                    assert code == 502 and "malformed" in err, (code, err)
                assert up.hostport in err
                # the gateway keeps serving
                assert get(gw.port, "/healthz")[0] == 200
                code, _, _ = request(gw.port, "GET", "/status.json")
                assert code == 200
    finally:
        for up in [sse, good] + list(bad.values()):
            up.close()


def test_admin_endpoint_requires_the_bearer_token():
    good = FakeUpstream("ok")
    try:
        cfg = health_cfg(admin_token="s3cret",
                         canary={"fake": {"variants": [{"name": "a", "weight": 1},
                                                       {"name": "b", "weight": 1}]}})
        cfg["upstreams"]["static"] = [good.hostport]
        with Gateway(cfg) as gw:
            gw.wait_ready()
            body = {"weights": {"a": 3, "b": 1}}
            assert request(gw.port, "PUT", "/admin/canary/fake", body)[0] == 401
            assert request(gw.port, "PUT", "/admin/canary/fake", body,
                           headers={"Authorization": "Bearer wrong"})[0] == 401
            auth = {"Authorization": "Bearer s3cret"}
            code, _, b = request(gw.port, "PUT", "/admin/canary/fake", {"weights": {"zz": 1}}, headers=auth)
            assert code == 400 and b"weights.zz: no such variant" in b
            code, _, b = request(gw.port, "PUT", "/admin/canary/other", body, headers=auth)
            assert code == 404
            assert request(gw.port, "PUT", "/admin/canary/fake", body, headers=auth)[0] == 200
            code, _, b = request(gw.port, "GET", "/admin/canary", headers=auth)
            assert json.loads(b)["canary"] == {"fake": {"a": 3, "b": 1}}
    finally:
        good.close()


def test_openai_requests_route_on_the_body_model():
    a = FakeUpstream("ok", openai_models=["llm-a"])
    b = FakeUpstream("ok", openai_models=["llm-b"])
    try:
        cfg = health_cfg()
        cfg["upstreams"]["static"] = [a.hostport, b.hostport]
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: all("llm-a" in r["models"] or "llm-b" in r["models"]
                                 for r in gw.status()["replicas"]), what="models")
            for _ in range(10):
                for model, up in (("llm-a", a), ("llm-b", b)):
                    code, h, _ = request(gw.port, "POST", "/v1/chat/completions",
                                         {"model": model, "messages": []})
                    assert code == 200 and h["x-cinfer-upstream"] == up.hostport
            code, _, body = request(gw.port, "POST", "/v1/completions", {"model": "llm-z"})
            assert code == 404 and b"llm-z" in body
            # no model in the body: any replica
            code, _, _ = request(gw.port, "GET", "/v1/models")
            assert code == 200
    finally:
        a.close()
        b.close()


def chromium(*args):
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", *args], capture_output=True, text=True,
                          timeout=60)


def test_status_page_in_headless_chromium():
    ok = FakeUpstream("ok")
    down = FakeUpstream("ok")
    down.close()  # listed but refusing connections: unhealthy
    try:
        cfg = health_cfg(canary={"fake": {"variants": [{"name": "stable", "weight": 90},
                                                       {"name": "canary", "weight": 10}]}})
        cfg["upstreams"]["static"] = [ok.hostport, down.hostport]
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(ok.hostport)["models"], what="models")
            wait_for(lambda: gw.replica(down.hostport)["state"] == "unhealthy", what="unhealthy")
            for _ in range(5):
                request(gw.port, "POST", "/v2/models/fake/infer", {})
            p = chromium("--dump-dom", gw.url + "/status")
            dom = p.stdout
            assert '<meta http-equiv="refresh" content="2">' in dom, p.stderr[-2000:]
            assert f'<tr class="healthy"><td>{ok.hostport}</td><td>healthy</td>' in dom
            assert f'<tr class="unhealthy"><td>{down.hostport}</td><td>unhealthy</td>' in dom
            assert "<td>canary</td><td></td><td>0</td><td>10</td>" in dom
            shot = os.path.join(os.environ.get("CINFER_BUILD_DIR", tempfile.gettempdir()),
                                "gateway-status.png")
            p = chromium("--window-size=1100,520", f"--screenshot={shot}", gw.url + "/status")
            with open(shot, "rb") as f:
                png = f.read()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    finally:
        ok.close()


def test_sigterm_of_the_gateway_lets_a_stream_in_flight_finish():
    sse = FakeUpstream("sse")
    try:
        cfg = health_cfg()
        cfg["upstreams"]["static"] = [sse.hostport]
        gw = Gateway(cfg).start()
        try:
            gw.wait_ready()
            wait_for(lambda: gw.replica(sse.hostport)["models"], what="models")
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=20)
            s.sendall(b"POST /v2/models/fake/generate_stream HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 2\r\n\r\n{}")
            got = b""
            while b"data: one" not in got:
                d = s.recv(4096)
                assert d
                got += d
            gw.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: any("draining" in line for line in gw.log), what="drain")
            assert get(gw.port, "/readyz")[0] != 200  # not ready (or not accepting)
            sse.release.set()
            while not got.endswith(b"0\r\n\r\n"):
                d = s.recv(4096)
                assert d, got
                got += d
            assert b"data: two" in got
            s.close()
            assert gw.proc.wait(30) == 0
        finally:
            gw.stop()
    finally:
        sse.close()
