"""End to end with a real Prometheus (Debian package) on loopback: it scrapes two
`cinfer serve` replicas and a `cinfer gateway` in front of them while a client drives a known
constant load through the gateway; PromQL then sees the request rate of that load, a
plausible p99 from the histograms, and the prometheus-adapter's per-pod query (the HPA's
metric, deploy/k8s/components/prometheus-adapter) returns one value per pod label."""
import os
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "deploy"))
from prom_scrape_test import Prometheus, static_job  # noqa: E402

from cinfer_server import copy_repo  # noqa: E402
from test_gateway_common import INFER_SIM, Gateway, replica, request, wait_for  # noqa: E402

RATE = 40.0       # requests/s driven through the gateway
DURATION = 12.0   # seconds of load


def drive(port, stop, counts):
    """Constant-rate open-loop client (one thread): request i is sent at t0 + i / RATE."""
    t0 = time.monotonic()
    i = 0
    while not stop.is_set():
        due = t0 + i / RATE
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        code, _, _ = request(port, "POST", "/v2/models/sim_detector/infer", INFER_SIM)
        counts[code] = counts.get(code, 0) + 1
        i += 1


def test_prometheus_scrapes_server_and_gateway_under_load():
    repo = copy_repo(["sim_detector"])
    with replica(repo) as a, replica(repo) as b:
        a.wait_ready()
        b.wait_ready()
        cfg = {"health": {"interval_ms": 200, "timeout_ms": 200, "healthy_threshold": 1,
                          "unhealthy_threshold": 2},
               "upstreams": {"models_interval_ms": 200, "static": [a.hostport, b.hostport]}}
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: all(len(r["models"]) > 0 for r in gw.status()["replicas"]),
                     what="model discovery")
            jobs = [static_job("cinfer-server", [a.hostport], {"namespace": "cinfer", "pod": "server-a"}),
                    static_job("cinfer-server", [b.hostport], {"namespace": "cinfer", "pod": "server-b"}),
                    static_job("cinfer-gateway", [f"127.0.0.1:{gw.port}"], {"namespace": "cinfer", "pod": "gw-0"})]
            # one job name, two static configs: merge them
            server = jobs[0]
            server["static_configs"] += jobs[1]["static_configs"]
            with Prometheus([server, jobs[2]]) as prom:
                prom.wait_scraped({"cinfer-server": 2, "cinfer-gateway": 1}, samples=2)
                stop, counts = threading.Event(), {}
                t = threading.Thread(target=drive, args=(gw.port, stop, counts))
                t.start()
                time.sleep(DURATION)  # the load itself: a fixed duration, not a wait for state
                # query while the load still runs so the rate windows are inside it
                win = "8s"
                srv_rate = prom.values(f'sum(rate(cinfer_request_success_total{{model="sim_detector"}}[{win}]))')
                gw_rate = prom.values(f'sum(rate(cinfer_gateway_requests_total{{model="sim_detector",code="200"}}[{win}]))')
                p99 = prom.values('histogram_quantile(0.99, sum by (le) (rate('
                                  f'cinfer_request_duration_seconds_bucket{{model="sim_detector"}}[{win}])))')
                gw_p99 = prom.values('histogram_quantile(0.99, sum by (le) (rate('
                                     f'cinfer_gateway_request_duration_seconds_bucket[{win}])))')
                adapter = prom.values('sum(avg_over_time(cinfer_pending_requests{namespace="cinfer",pod!=""}[1m])) by (pod)')
                per_pod = prom.values(f'sum(rate(cinfer_request_success_total[{win}])) by (pod)')
                stop.set()
                t.join(30)
            assert counts.get(200, 0) > RATE * DURATION * 0.8 and set(counts) == {200}, counts
            (srv,) = srv_rate.values()
            (gwr,) = gw_rate.values()
            # the rates match the load (the client is a single thread: allow for its stalls)
            assert RATE * 0.7 <= srv <= RATE * 1.1, srv
            assert RATE * 0.7 <= gwr <= RATE * 1.1, gwr
            (q,) = p99.values()
            # sim_detector executes in 2.1-5.2 ms (SIMULATED cost model); p99 is bounded by its
            # queue delay plus a few batches, never zero
            assert 0.002 <= q <= 0.5, q
            (gq,) = gw_p99.values()
            assert 0.002 <= gq <= 1.0, gq
            pods = {dict(k)["pod"] for k in adapter}
            assert pods == {"server-a", "server-b"}, adapter
            # the gateway balanced the load over both pods
            served = {dict(k)["pod"]: v for k, v in per_pod.items()}
            assert served.get("server-a", 0) > 0 and served.get("server-b", 0) > 0, served
