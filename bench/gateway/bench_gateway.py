#!/usr/bin/env python3
"""Gateway benchmarks on loopback (or any reachable hosts), with `cinfer bench` as the client.

  A. Added latency: one `identity` replica, closed loop at concurrency 1, alternating
     direct and through the gateway (--rounds times each) in one run; p50/p99 of both and
     the difference.
  B. Scaling: a SIMULATED accelerator model (sim backend, cost model base_us + per_item_us
     x batch, see --sim-*) on n = 1, 2, 3, 6 replicas behind the gateway, closed loop at
     --per-replica-concurrency x n; throughput and scaling efficiency RPS(n) / (n RPS(1)).

Usage: python3 bench/gateway/bench_gateway.py [--bin build/src/cli/cinfer] [--json out.json]
Prints a Markdown report. Everything it starts listens on 127.0.0.1 ephemeral ports and is
stopped at the end.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "model_repository")


class Proc:
    def __init__(self, cmd):
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = None
        ev = threading.Event()

        def pump():
            for line in self.p.stdout:
                m = re.search(r"http_port=(\d+)", line)
                if m and not ev.is_set():
                    self.port = int(m.group(1))
                    ev.set()
            ev.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ev.wait(60) or not self.port:
            raise RuntimeError("did not start: " + " ".join(cmd))

    def wait_ok(self, path, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{path} never 200 on port {self.port}")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()


def serve(bin_, repo, threads):
    s = Proc([bin_, "serve", "--model-repository", repo, "--host", "127.0.0.1", "--http-port", "0",
              "--threads", str(threads)])
    s.wait_ok("/v2/health/ready")
    return s


def gateway(bin_, ports, io_threads):
    cfg = {"upstreams": {"static": [f"127.0.0.1:{p}" for p in ports], "models_interval_ms": 500},
           "health": {"interval_ms": 200, "timeout_ms": 200, "healthy_threshold": 1}}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    g = Proc([bin_, "gateway", "--config", path, "--host", "127.0.0.1", "--port", "0",
              "--io-threads", str(io_threads)])
    g.wait_ok("/readyz")
    # wait for model discovery on every replica
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{g.port}/status.json") as r:
            st = json.load(r)
        if all(x["models"] for x in st["replicas"]):
            break
        time.sleep(0.05)
    os.unlink(path)
    return g


def bench(bin_, port, model, conc, args, shape=None):
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [bin_, "bench", "--url", f"http://127.0.0.1:{port}", "--model", model,
           "--concurrency", str(conc), "--warmup-ms", str(args.warmup_ms), "--window-ms",
           str(args.window_ms), "--max-windows", str(args.max_windows), "--threads",
           str(args.bench_threads), "--json", out, "--quiet"]
    if shape:
        cmd += ["--shape", shape]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
    with open(out) as f:
        d = json.load(f)
    os.unlink(out)
    return d["levels"][0]


def sim_repo(args):
    d = tempfile.mkdtemp(prefix="gw-bench-")
    dst = os.path.join(d, "sim_detector")
    shutil.copytree(os.path.join(EXAMPLES, "sim_detector"), dst)
    p = os.path.join(dst, "config.pbtxt")
    t = open(p).read()
    t = re.sub(r'"base_us" value: \{ string_value: "\d+" \}', f'"base_us" value: {{ string_value: "{args.sim_base_us}" }}', t)
    t = re.sub(r'"per_item_us" value: \{ string_value: "\d+" \}', f'"per_item_us" value: {{ string_value: "{args.sim_per_item_us}" }}', t)
    t = t.replace("max_batch_size: 32", f"max_batch_size: {args.sim_max_batch}")
    t = t.replace("count: 2 kind: KIND_GPU", "count: 1 kind: KIND_GPU")
    open(p, "w").write(t)
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "src", "cli", "cinfer"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup-ms", type=int, default=1000)
    ap.add_argument("--window-ms", type=int, default=2000)
    ap.add_argument("--max-windows", type=int, default=3)
    ap.add_argument("--bench-threads", type=int, default=1)
    ap.add_argument("--gateway-io-threads", type=int, default=1)
    ap.add_argument("--replicas", default="1,2,3,6")
    ap.add_argument("--per-replica-concurrency", type=int, default=16)
    ap.add_argument("--sim-base-us", type=int, default=20000)
    ap.add_argument("--sim-per-item-us", type=int, default=500)
    ap.add_argument("--sim-max-batch", type=int, default=8)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    report = {"args": vars(args)}
    procs = []
    try:
        if not args.skip_latency:
            repo = tempfile.mkdtemp(prefix="gw-bench-id-")
            shutil.copytree(os.path.join(EXAMPLES, "identity"), os.path.join(repo, "identity"))
            s = serve(args.bin, repo, 1)
            procs.append(s)
            g = gateway(args.bin, [s.port], args.gateway_io_threads)
            procs.append(g)
            rows = []
            for r in range(args.rounds):
                for name, port in (("direct", s.port), ("gateway", g.port)):
                    lv = bench(args.bin, port, "identity", 1, args, shape="INPUT0:1,16")
                    rows.append({"round": r, "path": name, "rps": lv["throughput_rps"],
                                 "p50_us": lv["latency"]["p50_us"], "p99_us": lv["latency"]["p99_us"],
                                 "errors": lv["errors"]})
            report["latency"] = rows
            g.stop()
            s.stop()
            procs.clear()
            print("### Added latency (identity model, concurrency 1, loopback)\n")
            print("| round | path | req/s | p50 µs | p99 µs | errors |\n|---|---|---|---|---|---|")
            for x in rows:
                print(f"| {x['round']} | {x['path']} | {x['rps']:.0f} | {x['p50_us']:.1f} | {x['p99_us']:.1f} | {x['errors']} |")
            med = lambda v: sorted(v)[len(v) // 2]
            d50 = med([x["p50_us"] for x in rows if x["path"] == "gateway"]) - med([x["p50_us"] for x in rows if x["path"] == "direct"])
            d99 = med([x["p99_us"] for x in rows if x["path"] == "gateway"]) - med([x["p99_us"] for x in rows if x["path"] == "direct"])
            report["added_p50_us"], report["added_p99_us"] = d50, d99
            print(f"\nadded latency (median over rounds): p50 {d50:.1f} µs, p99 {d99:.1f} µs\n")
        if not args.skip_scaling:
            repo = sim_repo(args)
            ns = [int(x) for x in args.replicas.split(",")]
            rows = []
            for n in ns:
                reps = [serve(args.bin, repo, 2) for _ in range(n)]
                procs.extend(reps)
                g = gateway(args.bin, [s.port for s in reps], args.gateway_io_threads)
                procs.append(g)
                lv = bench(args.bin, g.port, "sim_detector", args.per_replica_concurrency * n, args,
                           shape="images:1,16")
                rows.append({"replicas": n, "concurrency": args.per_replica_concurrency * n,
                             "rps": lv["throughput_rps"], "p50_ms": lv["latency"]["p50_us"] / 1000,
                             "p99_ms": lv["latency"]["p99_us"] / 1000, "errors": lv["errors"]})
                for p in procs:
                    p.stop()
                procs.clear()
            base = rows[0]["rps"] / rows[0]["replicas"]
            for x in rows:
                x["efficiency"] = x["rps"] / (x["replicas"] * base)
            report["scaling"] = rows
            print(f"### Scaling through the gateway (SIMULATED device: {args.sim_base_us} µs + "
                  f"{args.sim_per_item_us} µs x batch, max batch {args.sim_max_batch}, 1 instance)\n")
            print("| replicas | concurrency | req/s | p50 ms | p99 ms | errors | efficiency |\n|---|---|---|---|---|---|---|")
            for x in rows:
                print(f"| {x['replicas']} | {x['concurrency']} | {x['rps']:.0f} | {x['p50_ms']:.2f} | "
                      f"{x['p99_ms']:.2f} | {x['errors']} | {x['efficiency']:.3f} |")
    finally:
        for p in procs:
            p.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
