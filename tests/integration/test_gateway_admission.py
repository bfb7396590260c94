"""Canary splits and admission control through the gateway: a 90/10 split over 10,000
requests lands within +-1 pp (and follows a weight change made at run time through the
admin endpoint), the force header picks a variant, per-variant metrics; a rate limit of R/s
with burst B admits R*t + B (+-5%) with 429 + Retry-After for the rest; the concurrency
limit sheds the lowest priority class first."""
import http.client
import json

from test_gateway_common import (INFER_ID, FakeUpstream, Gateway, copy_repo_models,
                                 replica, request, saturate, send_many, wait_for)


def fast_cfg(statics, **extra):
    # Quick to admit a replica, slow to eject one: none of these tests is about health, and
    # on a loaded 2-core host one probe of the saturated (Python) fake upstream can take
    # over 100 ms, which ejected the only replica and turned a request into a 503.
    cfg = {"upstreams": {"static": statics, "models_interval_ms": 300},
           "health": {"interval_ms": 250, "timeout_ms": 250, "healthy_threshold": 1,
                      "unhealthy_threshold": 4}}
    cfg.update(extra)
    return cfg


def test_canary_split_admin_change_force_header_and_metrics():
    repo = copy_repo_models(["identity"])
    with replica(repo) as s1, replica(repo) as s2, replica(repo) as c1:
        for s in (s1, s2, c1):
            s.wait_ready()
        cfg = fast_cfg([{"address": s1.hostport, "group": "stable"},
                        {"address": s2.hostport, "group": "stable"},
                        {"address": c1.hostport, "group": "canary"}],
                       admin_token="tok",
                       canary={"identity": {"variants": [
                           {"name": "stable", "group": "stable", "weight": 90},
                           {"name": "canary", "group": "canary", "weight": 10}]}})
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: all(r["models"] for r in gw.status()["replicas"]), what="models")
            res = send_many(gw.port, 10000, "/v2/models/identity/infer", INFER_ID)
            assert all(code == 200 for code, _ in res)
            canary = sum(1 for _, h in res if h["x-cinfer-variant"] == "canary")
            assert abs(canary / 10000 - 0.10) <= 0.01, canary
            # variants went to their replica groups only
            assert all(h["x-cinfer-upstream"] == c1.hostport
                       for _, h in res if h["x-cinfer-variant"] == "canary")
            assert all(h["x-cinfer-upstream"] in (s1.hostport, s2.hostport)
                       for _, h in res if h["x-cinfer-variant"] == "stable")
            m = gw.metrics()
            n_canary = sum(float(line.split()[-1]) for line in m.splitlines()
                           if line.startswith("cinfer_gateway_requests_total{")
                           and 'variant="canary"' in line and 'code="200"' in line)
            assert n_canary == canary
            # run-time change to 50/50
            code, _, _ = request(gw.port, "PUT", "/admin/canary/identity",
                                 {"weights": {"stable": 50, "canary": 50}},
                                 headers={"Authorization": "Bearer tok"})
            assert code == 200
            res = send_many(gw.port, 2000, "/v2/models/identity/infer", INFER_ID)
            canary = sum(1 for _, h in res if h["x-cinfer-variant"] == "canary")
            assert abs(canary / 2000 - 0.5) <= 0.01, canary
            # force header
            for _ in range(20):
                code, h, _ = request(gw.port, "POST", "/v2/models/identity/infer", INFER_ID,
                                     headers={"X-Cinfer-Variant": "canary"})
                assert code == 200 and h["x-cinfer-upstream"] == c1.hostport


def test_rate_limit_admits_rate_times_t_plus_burst():
    up = FakeUpstream("ok")
    try:
        rate, burst = 100.0, 50
        cfg = fast_cfg([up.hostport],
                       rate_limit={"rate": rate, "burst": burst, "nodelay": True})
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(up.hostport)["models"], what="models")
            res = saturate(gw.port, "/v2/models/fake/infer", b"{}", {"X-API-Key": "tenant-a"}, 3.0)
            # the window in which the gateway admitted: first request sent .. last 200 seen
            t = res["window"]
            expected = rate * t + burst
            assert abs(res["admitted"] - expected) <= 0.05 * expected, (res, expected)
            assert res["limited"] > 0 and res["retry_after"] == {"1"}
            # another key has its own bucket
            code, _, _ = request(gw.port, "POST", "/v2/models/fake/infer", {},
                                 headers={"X-API-Key": "tenant-b"})
            assert code == 200
            assert "cinfer_gateway_rate_limited_total" in gw.metrics()
    finally:
        up.close()


def test_concurrency_limit_sheds_lowest_priority_first():
    up = FakeUpstream("hang")
    try:
        cfg = fast_cfg([up.hostport],
                       concurrency={"max": 4, "classes": [{"name": "high", "share": 1.0},
                                                          {"name": "low", "share": 0.5}]},
                       retry={"try_timeout_ms": 20000, "request_timeout_ms": 20000})
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(up.hostport)["models"], what="models")
            held = []

            def hold(prio):
                c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
                c.request("POST", "/v2/models/fake/infer", body=b"{}", headers={"X-Priority": prio})
                held.append(c)

            hold("low")
            hold("low")
            wait_for(lambda: gw.status()["active"] == 2, what="2 active")
            code, _, body = request(gw.port, "POST", "/v2/models/fake/infer", {},
                                    headers={"X-Priority": "low"})
            assert code == 503 and b"shed" in body
            # no header = the lowest class
            assert request(gw.port, "POST", "/v2/models/fake/infer", {})[0] == 503
            hold("high")
            hold("high")
            wait_for(lambda: gw.status()["active"] == 4, what="4 active")
            code, _, _ = request(gw.port, "POST", "/v2/models/fake/infer", {},
                                 headers={"X-Priority": "high"})
            assert code == 503
            m = gw.metrics()
            assert 'cinfer_gateway_shed_total{model="fake"} 3' in m
            up.release.set()  # the hung upstream closes: held requests end with a 5xx
            for c in held:
                r = c.getresponse()
                r.read()
                assert r.status in (502, 503)
                c.close()
    finally:
        up.close()


def test_canary_by_model_version_rewrites_the_path():
    import os
    import shutil
    repo = copy_repo_models(["identity"])
    shutil.copytree(os.path.join(repo, "identity", "1"), os.path.join(repo, "identity", "2"))
    with open(os.path.join(repo, "identity", "config.pbtxt"), "a") as f:
        f.write("\nversion_policy: { all { } }\n")
    with replica(repo) as s:
        s.wait_ready()
        cfg = fast_cfg([s.hostport],
                       canary={"identity": {"variants": [{"name": "v1", "version": 1, "weight": 3},
                                                         {"name": "v2", "version": 2, "weight": 1}]}})
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: "identity@2" in gw.status()["replicas"][0]["models"], what="models")
            versions = []
            for _ in range(40):
                code, h, body = request(gw.port, "POST", "/v2/models/identity/infer", INFER_ID)
                assert code == 200, body
                v = json.loads(body)["model_version"]
                assert h["x-cinfer-variant"] == {"1": "v1", "2": "v2"}[v]
                versions.append(v)
            assert versions.count("2") == 10 and versions.count("1") == 30
            # a version the client names itself is kept
            code, h, body = request(gw.port, "POST", "/v2/models/identity/versions/2/infer", INFER_ID)
            assert code == 200 and json.loads(body)["model_version"] == "2"


def test_rate_limit_without_nodelay_delays_the_burst_instead_of_rejecting():
    up = FakeUpstream("ok")
    try:
        cfg = fast_cfg([up.hostport], rate_limit={"rate": 20, "burst": 5})
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(up.hostport)["models"], what="models")
            # 1 + burst requests at once: all admitted (the excess ones after a delay)
            res = send_many(gw.port, 6, "/v2/models/fake/infer", {}, workers=6,
                            headers={"X-API-Key": "k"})
            assert sorted(code for code, _ in res) == [200] * 6
            # well beyond the burst: the rest is refused with 429
            res = send_many(gw.port, 40, "/v2/models/fake/infer", {}, workers=8,
                            headers={"X-API-Key": "k2"})
            codes = [code for code, _ in res]
            assert codes.count(429) > 0 and set(codes) <= {200, 429}
            assert all(h.get("retry-after") for code, h in res if code == 429)
    finally:
        up.close()


def test_canary_rolls_back_when_its_error_rate_crosses_the_threshold():
    stable = FakeUpstream("ok")
    bad = FakeUpstream("503")
    try:
        cfg = fast_cfg([{"address": stable.hostport, "group": "stable"},
                        {"address": bad.hostport, "group": "canary"}],
                       outlier={"consecutive_failures": 0},
                       canary={"fake": {"variants": [
                           {"name": "stable", "group": "stable", "weight": 50},
                           {"name": "canary", "group": "canary", "weight": 50}],
                           "rollback": {"max_error_rate": 0.2, "min_requests": 10}}})
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: all(r["models"] for r in gw.status()["replicas"]), what="models")
            codes = [request(gw.port, "POST", "/v2/models/fake/infer", {})[0] for _ in range(100)]
            assert codes.count(503) == 10 and codes.count(200) == 90, codes
            assert codes[-60:] == [200] * 60
            assert gw.status()["canary"] == {"fake": {"stable": 50, "canary": 0}}
            assert any("canary rollback" in line for line in gw.log)
    finally:
        stable.close()
        bad.close()


def test_overall_deadline_covers_time_spent_delayed_by_the_rate_limit():
    up = FakeUpstream("ok")
    try:
        cfg = fast_cfg([up.hostport], rate_limit={"rate": 1, "burst": 5},
                       retry={"try_timeout_ms": 400, "request_timeout_ms": 400})
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: gw.replica(up.hostport)["models"], what="models")
            res = send_many(gw.port, 3, "/v2/models/fake/infer", {}, workers=3,
                            headers={"X-API-Key": "k"})
            # the first goes at once; the others would wait >= 1 s (excess / rate)
            assert sorted(code for code, _ in res) == [200, 504, 504]
            code, _, body = request(gw.port, "POST", "/v2/models/fake/infer", {},
                                    headers={"X-API-Key": "other"})
            assert code == 200
    finally:
        up.close()
