"""The gateway on a multi-host cluster: Linux network namespaces joined by veth pairs to a
bridge (scripts/netns_cluster.sh), one host for the gateway, one per replica (`cinfer serve`
with the sim backend), one for the load generator (this process: its main thread, and so
every client thread it starts, enters the load host's namespace with setns(2)). Every
request crosses real interfaces between separate network stacks, as between machines.

  (a) kill -9 of one replica under steady load: zero failed client requests; the replica
      is out of rotation (outlier ejection or a failed check) within one health interval +
      timeout, unhealthy within unhealthy_threshold x interval + timeout, and no try goes
      to it afterwards;
  (b) SIGTERM of one replica under steady load: zero failed client requests; it drains;
  (c) a replica added to the watched upstreams file serves its first request within one
      discovery interval (file_interval_ms + 2 control ticks) plus one health interval;
  (d) a 90/10 canary split over 10,000 requests: canary share within +-1 pp, counted by
      response headers, by the gateway's per-variant metrics and by the canary replica's
      own request counter;
  (e) a rate limit of R/s with burst B admits R*t + B (+-5%) over t seconds of load > R.

Times (a, c) come from the gateway's own clock: /status.json reports `uptime_ms` and, per
replica, when it was added, turned healthy, learnt its models, first answered, went out of
rotation, turned unhealthy and was ejected. The test reads `uptime_ms` just before it acts
(kill, file change), so each measured delay is an upper bound of the true one.

Needs root and `ip netns`: CMake registers this test only where both exist (see
tests/integration/CMakeLists.txt); run by hand without root, it fails with that message.
Namespace names carry a per-run prefix (process id + a random digit), so concurrent runs
cannot collide; the fixture always tears the namespaces down, and reaps those of an earlier
run whose process died before its finalizer."""
import collections
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile

import pytest

from test_gateway_common import (BIN, INFER_SIM, LoadGen, fast_sim_repo, get, saturate,
                                 send_many, steady_load_then, wait_for)

SRC = os.environ.get("CINFER_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SRC, "scripts", "netns_cluster.sh")
GW, GW_PORT = "10.77.0.2", 8080
CTL_TICK_MS = 25  # the gateway's control-loop tick (src/gateway/control.c)
N_REPLICA_HOSTS = 4
CLONE_NEWNET = 0x40000000


def rep(k):
    return f"10.77.0.1{k}:8000"


def _setns(path_or_fd):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path_or_fd, os.O_RDONLY) if isinstance(path_or_fd, str) else path_or_fd
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns({path_or_fd}): {os.strerror(e)}")
    finally:
        if isinstance(path_or_fd, str):
            os.close(fd)


class Cluster:
    """The namespaces of one test run, and the processes of the current test."""

    def __init__(self):
        # cgw + this process's pid (6 hex digits: pids < 2^22) + 1 random hex digit: unique
        # among live runs, and a run whose process died (killed by a ctest timeout before its
        # finalizer ran) can be recognised and reaped by the next run (reap_stale)
        self.prefix = f"cgw{os.getpid():06x}{secrets.randbelow(16):x}"
        self.state = tempfile.mkdtemp(prefix=f"cinfer-{self.prefix}-")
        self.env = dict(os.environ, CGW_PREFIX=self.prefix, STATE=self.state,
                        CINFER_BIN=os.path.abspath(BIN))
        self.repo = fast_sim_repo()
        self.killed = set()

    def sh(self, *args, timeout=60):
        r = subprocess.run([SCRIPT, *map(str, args)], env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        assert r.returncode == 0, f"netns_cluster.sh {' '.join(map(str, args))}:\n{r.stdout}{r.stderr}"
        return r.stdout

    # -- processes ------------------------------------------------------------------------
    def replicas(self, *ks):
        for k in ks:
            self.sh("replica", k, self.repo)

    def gateway(self, cfg):
        path = os.path.join(self.state, "gateway.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.sh("gateway", path)

    def kill(self, k, sig):
        """`netns_cluster.sh kill K SIG`, without the shell's start-up time (the tests time
        what follows the signal)."""
        assert self.rc(f"r{k}") is None, f"replica {k} is not running"
        if sig == signal.SIGKILL:
            self.killed.add(f"r{k}")
        os.kill(int(open(os.path.join(self.state, f"r{k}.pid")).read()), sig)

    def add(self, k):
        """`netns_cluster.sh add K`, without the shell's start-up time."""
        with open(os.path.join(self.state, "upstreams"), "a") as f:
            f.write(f"{rep(k)}\n")

    def log(self, name):
        try:
            return open(os.path.join(self.state, f"{name}.log")).read()
        except OSError:
            return ""

    def rc(self, name):
        try:
            return int(open(os.path.join(self.state, f"{name}.rc")).read())
        except (OSError, ValueError):
            return None

    def stop_all(self):
        """Stops every process of this test and checks how each ended: exit 0 (137 for a
        replica this test killed with -9) and no sanitizer report in its log."""
        names = [f[:-4] for f in os.listdir(self.state) if f.endswith(".pid")]
        self.sh("stop")
        problems = []
        for name in sorted(names):
            text = self.log(name)
            for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
                if marker in text:
                    problems.append(f"{name}: {marker}\n{text[-4000:]}")
            want = 137 if name in self.killed else 0
            if self.rc(name) != want:
                problems.append(f"{name} exited with {self.rc(name)} (want {want}):\n{text[-2000:]}")
            for ext in (".log", ".rc"):
                try:
                    os.unlink(os.path.join(self.state, name + ext))
                except OSError:
                    pass
        self.killed.clear()
        return problems

    # -- the gateway's view -----------------------------------------------------------------
    def status(self):
        code, _, body = get(GW_PORT, "/status.json", host=GW)
        assert code == 200, body
        return json.loads(body)

    def replica(self, hostport, status=None):
        for r in (status or self.status())["replicas"]:
            if r["upstream"] == hostport:
                return r
        return None

    def metrics(self, host=GW, port=GW_PORT):
        code, _, body = get(port, "/metrics", host=host)
        assert code == 200
        return body.decode()


def metric_value(text, name, **labels):
    """Sum of the series of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    return total if found else None


def reap_stale():
    """Deletes the namespaces (and ends the processes in them) of earlier runs of this file
    whose test process is gone, e.g. killed by a ctest timeout before its finalizer ran."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for name in re.findall(r"^(cgw([0-9a-f]{6})[0-9a-f]-\w+)", names, re.M):
        ns, pid = name[0], int(name[1], 16)
        if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for p in pids.split():
            try:
                os.kill(int(p), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("test_gateway_netns needs root (ip netns, veth pairs); CMake registers it "
                    "only when configured as root")
    if shutil.which("ip") is None:
        pytest.fail("test_gateway_netns needs the `ip` command (iproute2)")
    reap_stale()
    c = Cluster()
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        c.sh("up", N_REPLICA_HOSTS)
        _setns(f"/var/run/netns/{c.prefix}-load")  # this thread and the clients it starts
        yield c
    finally:
        _setns(home)
        os.close(home)
        try:
            c.sh("down")
        finally:
            shutil.rmtree(c.state, ignore_errors=True)
            shutil.rmtree(c.repo, ignore_errors=True)
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert c.prefix not in left, left


@pytest.fixture
def cl(cluster):
    """The cluster, with every process of the test stopped (and checked) afterwards."""
    try:
        yield cluster
    finally:
        problems = cluster.stop_all()
    assert not problems, "\n".join(problems)


def base_cfg(**extra):
    cfg = {"upstreams": {"models_interval_ms": 500},
           "health": {"interval_ms": 500, "timeout_ms": 300, "unhealthy_threshold": 2,
                      "healthy_threshold": 1},
           "outlier": {"consecutive_failures": 3, "base_ejection_ms": 30000,
                       "max_ejected_percent": 50},
           "retry": {"budget_min": 50}}
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(cfg.get(k), dict):
            cfg[k].update(v)
        else:
            cfg[k] = v
    return cfg


def wait_models(cl, hostports):
    wait_for(lambda: all((cl.replica(h) or {}).get("models") for h in hostports), 20,
             f"models of {hostports}")


def failover_cluster(cl):
    cl.replicas(1, 2, 3)
    cfg = base_cfg(upstreams={"static": [rep(1), rep(2), rep(3)]})
    cl.gateway(cfg)
    wait_models(cl, [rep(1), rep(2), rep(3)])
    return cfg


def test_a_kill_9_of_one_replica_loses_no_request_and_ejects_it(cl):
    cfg = failover_cluster(cl)
    h = cfg["health"]

    def fault():
        t_kill = cl.status()["uptime_ms"]  # read before the kill: delays are upper bounds
        cl.kill(3, signal.SIGKILL)
        return t_kill

    t_kill, load = steady_load_then(GW_PORT, fault, host=GW)
    assert load.failures == [], load.failures[:5]
    assert load.by_upstream.get(rep(3), 0) > 0
    # the active checks mark it unhealthy after unhealthy_threshold failed checks
    wait_for(lambda: cl.replica(rep(3))["unhealthy_ms"] is not None,
             (h["unhealthy_threshold"] * h["interval_ms"] + h["timeout_ms"]) / 1000 + 10,
             "the killed replica marked unhealthy")
    r = cl.replica(rep(3))
    out = r["out_ms"] - t_kill
    unhealthy = r["unhealthy_ms"] - t_kill
    ejected = r["ejected_ms"] - t_kill if r["ejected_ms"] is not None else None
    how = f"ejected (outlier) after {ejected} ms" if ejected is not None else "by a failed check"
    print(f"\n(a) kill -9 at gateway t={t_kill} ms: out of rotation after {out} ms, {how} "
          f"({r['failures']} failed tries, all retried), unhealthy after {unhealthy} ms; "
          f"{load.count()} requests, 0 failed")
    # out of rotation (failed check, or outlier ejection) within one check period: the next
    # periodic check (<= interval) fails within its timeout; a failed try makes it at once
    assert 0 <= out <= h["interval_ms"] + h["timeout_ms"] + CTL_TICK_MS, r
    assert unhealthy <= h["unhealthy_threshold"] * h["interval_ms"] + h["timeout_ms"] + CTL_TICK_MS, r
    # Which mechanism took it out first depends on a race (consecutive_failures failed tries
    # vs. the immediate check that the first refused connection asks for); both are bounded
    # above. Outlier ejection needs consecutive_failures failed tries and happens once.
    assert r["ejections"] in (0, 1), r
    if r["ejections"]:
        assert 0 <= ejected <= h["interval_ms"] + h["timeout_ms"] + CTL_TICK_MS, r
        assert r["failures"] >= cfg["outlier"]["consecutive_failures"], r
    else:
        assert r["out_ms"] <= r["unhealthy_ms"], r  # out at its first failed check
    m = cl.metrics()
    assert metric_value(m, "cinfer_gateway_ejections_total", upstream=rep(3)) == r["ejections"]
    assert metric_value(m, "cinfer_gateway_upstream_healthy", upstream=rep(3)) == 0
    # and no try goes to it any more while the load goes on
    tries = r["requests"]
    load2 = LoadGen(GW_PORT, "/v2/models/sim_detector/infer", INFER_SIM, 4, host=GW).start()
    try:
        wait_for(lambda: load2.count() >= 300, 30, "load after the ejection")
    finally:
        load2.stop()
    assert load2.failures == [] and rep(3) not in load2.by_upstream, load2.by_upstream
    assert cl.replica(rep(3))["requests"] == tries


def test_b_sigterm_of_one_replica_loses_no_request(cl):
    cfg = failover_cluster(cl)
    h = cfg["health"]

    def fault():
        t_term = cl.status()["uptime_ms"]
        cl.kill(3, signal.SIGTERM)
        return t_term

    t_term, load = steady_load_then(GW_PORT, fault, host=GW)
    assert load.failures == [], load.failures[:5]
    # it drained and exited by itself, with status 0
    wait_for(lambda: cl.rc("r3") is not None, 30, "the replica to exit after SIGTERM")
    assert cl.rc("r3") == 0, cl.log("r3")[-2000:]
    r = cl.replica(rep(3))
    out = r["out_ms"] - t_term
    print(f"\n(b) SIGTERM at gateway t={t_term} ms: out of rotation after {out} ms "
          f"({r['failures']} tries refused while draining, all retried); {load.count()} "
          f"requests, 0 failed")
    assert 0 <= out <= h["interval_ms"] + h["timeout_ms"] + CTL_TICK_MS, r
    assert r["state"] != "healthy", r


def test_c_replica_added_to_the_upstreams_file_serves_within_one_discovery_interval(cl):
    cl.replicas(1, 2, 4)
    upstreams = os.path.join(cl.state, "upstreams")
    with open(upstreams, "w") as f:
        f.write(f"{rep(1)}\n{rep(2)}\n")
    cfg = base_cfg(upstreams={"file": upstreams, "file_interval_ms": 1000})
    h, interval = cfg["health"], cfg["upstreams"]["file_interval_ms"]
    cl.gateway(cfg)
    wait_models(cl, [rep(1), rep(2)])
    load = LoadGen(GW_PORT, "/v2/models/sim_detector/infer", INFER_SIM, 4, host=GW).start()
    try:
        wait_for(lambda: load.count() >= 100, 30, "load on the first two replicas")
        t0 = cl.status()["uptime_ms"]  # read before the change: delays are upper bounds
        cl.add(4)
        # one discovery interval = file_interval_ms (the file is polled that often) + one
        # control tick (the poll runs at the first tick when due) + one tick of scheduling
        # slack; then the gateway checks the new replica at once (not at the next health
        # interval), learns its models at the next tick, and balances onto it: all of that
        # within one health interval
        discovery = interval + 2 * CTL_TICK_MS
        bound = discovery + h["interval_ms"]
        def served():
            s = cl.status()
            return s if (cl.replica(rep(4), s) or {}).get("first_ok_ms") is not None else None

        st = wait_for(served, bound / 1000 + 10, "the first request served by the added replica")
        wait_for(lambda: load.by_upstream.get(rep(4), 0) > 0, 10, "a client answer from it")
    finally:
        load.stop()
    assert load.failures == [], load.failures[:5]
    r = cl.replica(rep(4), st)
    d = {k: r[k] - t0 for k in ("added_ms", "healthy_ms", "models_ms", "first_ok_ms")}
    print(f"\n(c) file changed at gateway t={t0} ms: discovered +{d['added_ms']} ms, healthy "
          f"+{d['healthy_ms']}, models +{d['models_ms']}, first request served "
          f"+{d['first_ok_ms']} ms (bound {bound} ms)")
    assert 0 <= d["added_ms"] <= discovery, d
    assert d["added_ms"] <= d["healthy_ms"] <= d["models_ms"] <= d["first_ok_ms"], d
    assert d["first_ok_ms"] - d["added_ms"] <= h["interval_ms"], d
    assert d["first_ok_ms"] <= bound, d


def test_d_canary_90_10_over_10000_requests_lands_within_1pp(cl):
    cl.replicas(1, 2, 3)
    cl.gateway(base_cfg(
        upstreams={"static": [{"address": rep(1), "group": "stable"},
                              {"address": rep(2), "group": "stable"},
                              {"address": rep(3), "group": "canary"}]},
        canary={"sim_detector": {"variants": [
            {"name": "stable", "group": "stable", "weight": 90},
            {"name": "canary", "group": "canary", "weight": 10}]}}))
    wait_models(cl, [rep(1), rep(2), rep(3)])
    n = 10000
    served_before = metric_value(cl.metrics("10.77.0.13", 8000), "cinfer_request_success_total",
                                 model="sim_detector") or 0
    res = send_many(GW_PORT, n, "/v2/models/sim_detector/infer", INFER_SIM, workers=4, host=GW)
    codes = collections.Counter(code for code, _ in res)
    assert len(res) == n and codes == {200: n}, (codes, cl.log("gw")[-3000:])
    by_header = sum(1 for _, hd in res if hd["x-cinfer-variant"] == "canary")
    # each variant went to its replica group only
    assert all(hd["x-cinfer-upstream"] == rep(3) for _, hd in res
               if hd["x-cinfer-variant"] == "canary")
    assert all(hd["x-cinfer-upstream"] in (rep(1), rep(2)) for _, hd in res
               if hd["x-cinfer-variant"] == "stable")
    by_metric = metric_value(cl.metrics(), "cinfer_gateway_requests_total", model="sim_detector",
                             variant="canary", code="200")
    by_replica = metric_value(cl.metrics("10.77.0.13", 8000), "cinfer_request_success_total",
                              model="sim_detector") - served_before
    print(f"\n(d) canary: {by_header} of {n} by header, {by_metric:.0f} by gateway metric, "
          f"{by_replica:.0f} served by the canary replica -> share {by_header / n:.2%}")
    for count in (by_header, by_metric, by_replica):
        assert abs(count / n - 0.10) <= 0.01, (by_header, by_metric, by_replica)
    assert by_header == by_metric == by_replica


def test_e_rate_limit_admits_rate_times_t_plus_burst(cl):
    cl.replicas(1)
    # burst/rate = 1 s: a client thread stalled that long on a loaded machine loses nothing
    rate, burst, seconds = 100.0, 100, 4.0
    cl.gateway(base_cfg(upstreams={"static": [rep(1)]},
                        rate_limit={"rate": rate, "burst": burst, "nodelay": True}))
    wait_models(cl, [rep(1)])
    res = saturate(GW_PORT, "/v2/models/sim_detector/infer", INFER_SIM,
                   {"X-API-Key": "tenant-a"}, seconds, workers=4, host=GW)
    t = res["window"]
    expected = rate * t + burst
    offered = (res["admitted"] + res["limited"]) / t
    print(f"\n(e) rate {rate:.0f}/s burst {burst} over t={t:.3f} s at {offered:.0f} req/s offered: "
          f"admitted {res['admitted']}, R*t+B = {expected:.1f} "
          f"({(res['admitted'] - expected) / expected:+.2%}), 429: {res['limited']}")
    assert offered > 1.5 * rate, res  # the load is above R
    assert abs(res["admitted"] - expected) <= 0.05 * expected, (res, expected)
    assert res["limited"] > 0 and res["retry_after"] == {"1"}
    m = cl.metrics()
    assert metric_value(m, "cinfer_gateway_rate_limited_total", model="sim_detector") == res["limited"]
