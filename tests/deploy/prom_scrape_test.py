#!/usr/bin/env python3
"""prom_scrape_test.py: run a real Prometheus on loopback against /metrics targets, ask PromQL.

A harness and its own test. The harness (class Prometheus) starts the `prometheus` binary
with a temporary configuration and storage, listening on 127.0.0.1 only, waits until it has
scraped its targets, evaluates PromQL through the HTTP API and stops it. Any target that
serves the Prometheus text format works: `cinfer serve`, `cinfer gateway`, or the stand-ins
below.

Use it from another test (the end-to-end scrape of cinfer serve/gateway):
    with Prometheus(scrape_configs=[static_job("cinfer-server", ["127.0.0.1:8002"],
                                               {"namespace": "cinfer", "pod": "p0"})]) as prom:
        prom.wait_scraped({"cinfer-server": 1}, samples=3)
        prom.query('sum(rate(cinfer_inference_count_total[10s]))')
or from the shell:
    prom_scrape_test.py --target cinfer-server=127.0.0.1:8002 --query 'up' --expect-nonempty

--self-test (the ctest) serves two "server pods" and one "gateway" with python's http.server:
counters grow at fixed rates per second of elapsed time and histograms at fixed per-bucket
rates, so PromQL's answers are known in advance. Through deploy/prometheus/prometheus.yml's
own relabelling (Kubernetes pod metadata simulated on static targets, since Debian's
Prometheus lacks kubernetes_sd) it checks: targets get job/namespace/pod labels; rate()
matches the served rate; histogram_quantile() returns the value the bucket rates imply; the
prometheus-adapter query returns one value per pod label; every dashboard, adapter, KEDA and
alert expression evaluates on a real Prometheus (dashboard ones return data), and the alert
rules load and evaluate without error.
Waits are on conditions with a bound (polling the API), never fixed sleeps.
"""
import argparse
import contextlib
import http.server
import json
import math
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
import promql_exprs  # noqa: E402

DEFAULT_TIMEOUT_S = 60.0


class HarnessError(Exception):
    pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def static_job(job, targets, labels=None, interval="1s", relabel_configs=None, metrics_path="/metrics"):
    """A scrape_config entry for fixed host:port targets."""
    sc = {"job_name": job, "scrape_interval": interval, "scrape_timeout": interval,
          "metrics_path": metrics_path,
          "static_configs": [{"targets": list(targets), "labels": dict(labels or {})}]}
    if relabel_configs:
        sc["relabel_configs"] = relabel_configs
    return sc


def wait_until(what, fn, timeout=DEFAULT_TIMEOUT_S, poll=0.2):
    """Poll fn() until it returns a truthy value; raise naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = fn()
            if v:
                return v
            last = v
        except (HarnessError, urllib.error.URLError, ConnectionError, OSError) as e:
            last = e
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
        time.sleep(poll)


class Prometheus:
    """A real Prometheus server on 127.0.0.1 with a temporary config and TSDB."""

    def __init__(self, scrape_configs, rule_files=(), binary=None, eval_interval="1s", extra_files=()):
        self.binary = binary or shutil.which("prometheus") or "/usr/bin/prometheus"
        self.scrape_configs = scrape_configs
        self.rule_files = [pathlib.Path(r) for r in rule_files]
        self.extra_files = [pathlib.Path(f) for f in extra_files]
        self.eval_interval = eval_interval
        self.proc = None
        self.dir = None
        self.port = None

    # -- lifecycle
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=DEFAULT_TIMEOUT_S):
        self.dir = tempfile.mkdtemp(prefix="cinfer-prom-")
        for rf in self.rule_files + self.extra_files:
            shutil.copy(rf, self.dir)
        names = [rf.name for rf in self.rule_files]
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": self.eval_interval},
               "rule_files": names, "scrape_configs": self.scrape_configs}
        cfg_path = pathlib.Path(self.dir) / "prometheus.yml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.port = free_port()
        self.log = open(pathlib.Path(self.dir) / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={cfg_path}", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1h"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)

        def ready():
            if self.proc.poll() is not None:
                raise HarnessError(f"prometheus exited with {self.proc.returncode}:\n{self.logtext()}")
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        try:
            wait_until("prometheus to be ready", ready, timeout)
        except HarnessError as e:
            # a lost race for the port, or a bad config: report with the log
            self.stop()
            raise HarnessError(f"{e}\n{self.logtext()}") from None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()
            self.log = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def logtext(self):
        try:
            return (pathlib.Path(self.dir) / "prometheus.log").read_text()[-4000:]
        except (OSError, TypeError):
            return ""

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    # -- API
    def api(self, path, **params):
        q = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.load(e)
        if body.get("status") != "success":
            raise HarnessError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr):
        """Instant query; returns the result list of a vector (or [[t, v]] for a scalar)."""
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def values(self, expr):
        """{frozenset(labels.items()): float} of an instant query."""
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in self.query(expr)}

    def wait_scraped(self, jobs, samples=3, timeout=DEFAULT_TIMEOUT_S):
        """Wait until every job has its number of targets up with at least `samples` scrapes
        each (so rate() over a window covering them has data)."""
        def ok():
            for job, n in jobs.items():
                v = self.values(f'count_over_time(up{{job="{job}"}}[1h]) >= {samples} '
                                f'and up{{job="{job}"}} == 1')
                if len(v) != n:
                    return False
            return True
        try:
            return wait_until(f"scrapes of {jobs}", ok, timeout)
        except HarnessError:
            targets = self.api("targets")["activeTargets"]
            raise HarnessError("targets: " + json.dumps(
                [(t["labels"], t["health"], t["lastError"]) for t in targets])) from None

    def wait_rules_evaluated(self, timeout=DEFAULT_TIMEOUT_S):
        def ok():
            groups = self.api("rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            evaluated = all(r["health"] == "ok" and not r.get("lastEvaluation", "0001").startswith("0001")
                            for r in rules)
            return bool(rules) and evaluated
        try:
            return wait_until("every rule to evaluate with health ok", ok, timeout)
        except HarnessError:
            groups = self.api("rules")["groups"]
            raise HarnessError("rules: " + json.dumps([(r["name"], r["health"], r.get("lastError"))
                                                       for g in groups for r in g["rules"]])) from None


# =============================================================================== self-test
class FakeTarget:
    """Serves a /metrics text that a function of elapsed seconds produces. Every sample
    carries an explicit timestamp, the same instant its value was computed for, so rate()
    sees exact slopes however late the handler runs on a loaded machine."""

    def __init__(self, render):
        self.render = render
        self.t0 = time.time()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                now_ms = int(time.time() * 1000)
                text = outer.render(now_ms / 1000.0 - outer.t0)
                body = "\n".join(ln if ln.startswith("#") or not ln else f"{ln} {now_ms}"
                                 for ln in text.splitlines()) + "\n"
                body = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# What the stand-in server pods serve: rates per second of elapsed time and gauge values.
# Request latency buckets: per second, 5 requests <= 0.1 s, 4 more <= 0.5 s, 1 more <= 1 s.
LAT_BUCKETS = [("0.1", 5.0), ("0.5", 9.0), ("1", 10.0), ("+Inf", 10.0)]
P99_EXPECTED = 0.5 + (1 - 0.5) * (0.99 * 10 - 9) / (10 - 9)      # linear in the (0.5, 1] bucket
P50_EXPECTED = 0.0 + (0.1 - 0.0) * (0.5 * 10 - 0) / 5              # linear in the (0, 0.1] bucket
PODS = {"cinfer-server-a": {"scale": 1.0, "pending": 3, "waiting": 1, "running": 10},
        "cinfer-server-b": {"scale": 2.0, "pending": 7, "waiting": 2, "running": 20}}
MODEL = 'model="resnet50",version="1"'


def _hist(name, labels, buckets, t, scale):
    out = [f"# TYPE {name} histogram"]
    for le, rate in buckets:
        out.append(f'{name}_bucket{{{labels},le="{le}"}} {rate * scale * t:.6f}')
    total = buckets[-1][1] * scale * t
    out.append(f"{name}_sum{{{labels}}} {total * 0.2:.6f}")
    out.append(f"{name}_count{{{labels}}} {total:.6f}")
    return out


def server_metrics(pod):
    p = PODS[pod]
    s = p["scale"]

    def render(t):
        ll = f'{MODEL}'
        lines = [
            "# HELP cinfer_inference_count_total Inferences performed.",
            "# TYPE cinfer_inference_count_total counter",
            f"cinfer_inference_count_total{{{ll}}} {10 * s * t:.6f}",
            "# TYPE cinfer_execution_count_total counter",
            f"cinfer_execution_count_total{{{ll}}} {2.5 * s * t:.6f}",
            "# TYPE cinfer_request_success_total counter",
            f"cinfer_request_success_total{{{ll}}} {9.9 * s * t:.6f}",
            "# TYPE cinfer_request_failure_total counter",
            f'cinfer_request_failure_total{{{ll},reason="backend"}} {0.1 * s * t:.6f}',
            "# TYPE cinfer_rejected_total counter",
            f'cinfer_rejected_total{{{ll},reason="queue_full"}} {0.05 * s * t:.6f}',
            "# TYPE cinfer_pending_requests gauge",
            f"cinfer_pending_requests{{{ll}}} {p['pending']}",
            "# TYPE cinfer_instance_busy_ratio gauge",
            f'cinfer_instance_busy_ratio{{{ll},instance="resnet50_0"}} 0.5',
            "# TYPE cinfer_process_cpu_seconds_total counter",
            f"cinfer_process_cpu_seconds_total {1.5 * t:.6f}",
            "# TYPE cinfer_process_resident_memory_bytes gauge",
            "cinfer_process_resident_memory_bytes 1.5e9",
            "# TYPE cinfer_gpu_utilization_ratio gauge",
            'cinfer_gpu_utilization_ratio{gpu="0"} 0.7',
            "# TYPE cinfer_gpu_memory_used_bytes gauge",
            'cinfer_gpu_memory_used_bytes{gpu="0"} 4e10',
            "# TYPE cinfer_gpu_memory_total_bytes gauge",
            'cinfer_gpu_memory_total_bytes{gpu="0"} 8e10',
            "# TYPE cinfer_llm_running_sequences gauge",
            f"cinfer_llm_running_sequences{{{ll}}} {p['running']}",
            "# TYPE cinfer_llm_waiting_sequences gauge",
            f"cinfer_llm_waiting_sequences{{{ll}}} {p['waiting']}",
            "# TYPE cinfer_llm_kv_cache_usage_ratio gauge",
            f"cinfer_llm_kv_cache_usage_ratio{{{ll}}} 0.4",
        ]
        for name, rate in [("cinfer_llm_prompt_tokens_total", 500), ("cinfer_llm_generation_tokens_total", 200),
                           ("cinfer_llm_prefix_cache_queries_total", 10), ("cinfer_llm_prefix_cache_hits_total", 4),
                           ("cinfer_llm_preemptions_total", 0.01)]:
            lines += [f"# TYPE {name} counter", f"{name}{{{ll}}} {rate * s * t:.6f}"]
        lines += _hist("cinfer_request_duration_seconds", ll, LAT_BUCKETS, t, s)
        lines += _hist("cinfer_queue_duration_seconds", ll, [("0.01", 9.0), ("0.1", 10.0), ("+Inf", 10.0)], t, s)
        lines += _hist("cinfer_compute_duration_seconds", ll, [("0.1", 8.0), ("0.5", 10.0), ("+Inf", 10.0)], t, s)
        lines += _hist("cinfer_batch_size", ll, [("1", 1.0), ("4", 2.0), ("8", 2.5), ("+Inf", 2.5)], t, s)
        lines += _hist("cinfer_llm_time_to_first_token_seconds", ll, [("0.1", 1.0), ("1", 2.0), ("+Inf", 2.0)], t, s)
        lines += _hist("cinfer_llm_inter_token_latency_seconds", ll, [("0.02", 150.0), ("0.05", 200.0),
                                                                      ("+Inf", 200.0)], t, s)
        lines += _hist("cinfer_llm_e2e_request_seconds", ll, [("1", 1.0), ("10", 2.0), ("+Inf", 2.0)], t, s)
        return "\n".join(lines) + "\n"
    return render


def gateway_metrics(t):
    up = 'upstream="10.0.0.1:8000",model="resnet50"'
    lines = ["# TYPE cinfer_gateway_requests_total counter",
             f'cinfer_gateway_requests_total{{{up},code="200"}} {29 * t:.6f}',
             f'cinfer_gateway_requests_total{{{up},code="503"}} {1 * t:.6f}',
             "# TYPE cinfer_gateway_upstream_healthy gauge",
             f"cinfer_gateway_upstream_healthy{{{up}}} 1"]
    for name, rate in [("cinfer_gateway_ejections_total", 0.01), ("cinfer_gateway_retries_total", 0.5),
                       ("cinfer_gateway_rate_limited_total", 0.2), ("cinfer_gateway_shed_total", 0.1)]:
        lines += [f"# TYPE {name} counter", f"{name}{{{up}}} {rate * t:.6f}"]
    lines += _hist("cinfer_gateway_request_duration_seconds", up, LAT_BUCKETS, t, 3.0)
    return "\n".join(lines) + "\n"


def pod_meta(pod, component, port):
    """Labels Prometheus' kubernetes_sd (role: pod) would attach, for a static target."""
    return {
        "__meta_kubernetes_namespace": "cinfer",
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_node_name": "node-1",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "cinfer",
        "__meta_kubernetes_pod_label_app_kubernetes_io_component": component,
        "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
        "__meta_kubernetes_pod_annotation_prometheus_io_port": str(port),
        "__meta_kubernetes_pod_annotation_prometheus_io_path": "/metrics",
    }


def shipped_scrape_config(targets):
    """deploy/prometheus/prometheus.yml's cinfer job, with kubernetes_sd_configs replaced by
    static targets carrying the same meta labels. Returns (scrape_configs, original)."""
    cfg = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    job = next(j for j in cfg["scrape_configs"] if j["job_name"] == "cinfer")
    sd = job.get("kubernetes_sd_configs")
    if not sd or sd[0].get("role") != "pod":
        raise HarnessError("deploy/prometheus/prometheus.yml: the cinfer job is not kubernetes_sd role pod")
    copy_job = dict(job)
    del copy_job["kubernetes_sd_configs"]
    # The pod IP in __address__ has no port for a pod without declared ports; the relabelling
    # must then take the port from the annotation: start from a portless address.
    copy_job["static_configs"] = [{"targets": ["127.0.0.1"], "labels": meta} for meta in targets]
    copy_job["scrape_interval"] = "1s"
    copy_job["scrape_timeout"] = "1s"
    return [copy_job]


def close(a, b, rel=1e-6):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def self_test(binary):
    checks = []

    def check(name, ok, detail=""):
        checks.append(ok)
        print(f"{'ok' if ok else 'FAIL'}: {name}{': ' + detail if detail else ''}")

    fakes = {pod: FakeTarget(server_metrics(pod)) for pod in PODS}
    gw = FakeTarget(gateway_metrics)
    try:
        metas = [pod_meta(pod, "server", f.port) for pod, f in fakes.items()]
        metas.append(pod_meta("cinfer-gateway-a", "gateway", gw.port))
        scrape = shipped_scrape_config(metas)
        with Prometheus(scrape, rule_files=[REPO / "deploy/prometheus/alerts.yml"], binary=binary) as prom:
            prom.wait_scraped({"cinfer-server": 2, "cinfer-gateway": 1}, samples=4)

            up = prom.query('up{job="cinfer-server"}')
            pods = sorted(r["metric"].get("pod", "") for r in up)
            nss = {r["metric"].get("namespace") for r in up}
            check("relabelling gives job, namespace and pod labels", pods == sorted(PODS) and nss == {"cinfer"},
                  f"pods={pods} namespaces={nss}")

            # rate over a window that holds several scrapes: 10/s on pod a + 20/s on pod b
            got = prom.values('sum(rate(cinfer_inference_count_total{job="cinfer-server"}[4s]))')
            v = next(iter(got.values()), float("nan"))
            check("rate() matches the served rate (30/s)", close(v, 30.0), f"{v}")
            per_pod = {dict(k)["pod"]: x for k, x in
                       prom.values('sum by (pod) (rate(cinfer_inference_count_total[4s]))').items()}
            check("per-pod rates 10/s and 20/s",
                  close(per_pod.get("cinfer-server-a", 0), 10) and close(per_pod.get("cinfer-server-b", 0), 20),
                  f"{per_pod}")

            for q, want in ((0.99, P99_EXPECTED), (0.5, P50_EXPECTED)):
                got = prom.values(f'histogram_quantile({q}, sum by (le) '
                                  f'(rate(cinfer_request_duration_seconds_bucket{{job="cinfer-server"}}[4s])))')
                v = next(iter(got.values()), float("nan"))
                check(f"histogram_quantile({q}) = {want:.3f}", close(v, want), f"{v}")

            # prometheus-adapter's queries, with the adapter's substitutions: one value per pod
            ad = {where: e for where, e in promql_exprs.collect(REPO) if where.startswith("adapter")}
            for metric, field in (("cinfer_pending_requests", "pending"),
                                  ("cinfer_llm_waiting_sequences", "waiting"),
                                  ("cinfer_llm_running_sequences", "running")):
                expr = ad[f"adapter rule {metric} metricsQuery"]
                got = {dict(k).get("pod"): x for k, x in prom.values(expr).items()}
                want = {pod: float(p[field]) for pod, p in PODS.items()}
                check(f"adapter {metric}: one value per pod", got == want, f"{got} want {want}")
            expr = ad["adapter rule cinfer_queue_seconds_per_request metricsQuery"]
            got = {dict(k).get("pod"): x for k, x in prom.values(expr).items()}
            check("adapter cinfer_queue_seconds_per_request: one value per pod (0.2 s)",
                  set(got) == set(PODS) and all(close(x, 0.2) for x in got.values()), f"{got}")

            # everything deploy/ ships evaluates on this real Prometheus
            for where, expr in promql_exprs.collect(REPO):
                try:
                    res = prom.query(expr)
                except HarnessError as e:
                    check(f"evaluates: {where}", False, str(e))
                    continue
                if where.startswith("dashboard") or where.startswith("keda"):
                    check(f"returns data: {where}", len(res) > 0, "" if res else expr)
                else:
                    checks.append(True)
            prom.wait_rules_evaluated()
            check("alert rules load and evaluate with health ok", True)
            fired = prom.values("ALERTS")
            check("no alert fires on healthy stand-ins", not fired, f"{[dict(k) for k in fired]}")
    finally:
        for f in fakes.values():
            f.close()
        gw.close()
    failed = checks.count(False)
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", default=None, help="prometheus binary (default: from PATH)")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--target", action="append", default=[], metavar="JOB=HOST:PORT[,k=v...]")
    ap.add_argument("--query", action="append", default=[])
    ap.add_argument("--expect-nonempty", action="store_true")
    ap.add_argument("--samples", type=int, default=3, help="scrapes to wait for per target")
    args = ap.parse_args()
    if args.self_test:
        return self_test(args.prometheus)
    if not args.target:
        ap.error("--target or --self-test")
    jobs, counts = {}, {}
    for t in args.target:
        job, rest = t.split("=", 1)
        addr, *kv = rest.split(",")
        jobs.setdefault(job, []).append((addr, dict(x.split("=", 1) for x in kv)))
        counts[job] = counts.get(job, 0) + 1
    scs = []
    for job, ts in jobs.items():
        sc = static_job(job, [])
        sc["static_configs"] = [{"targets": [a], "labels": lab} for a, lab in ts]
        scs.append(sc)
    rc = 0
    with Prometheus(scs, binary=args.prometheus) as prom:
        prom.wait_scraped(counts, samples=args.samples)
        for q in args.query:
            res = prom.query(q)
            print(json.dumps({"query": q, "result": res}))
            if args.expect_nonempty and not res:
                rc = 1
    return rc


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
