#!/usr/bin/env python3
"""bench_chat_users.py: seed 003's chat workload, scaled to the machine: N concurrent users (one
multi-turn conversation each, a shared system prompt, think time between turns), driven by
`cinfer bench --openai chat --conversation`, against

  1. one `cinfer serve` (engine admission: max_seqs, max_waiting; refusals are 503 + Retry-After),
  2. two `cinfer serve` replicas behind `cinfer gateway` (the same cores split between them),
  3. llama.cpp's server: `llama-server` (--llama-server, $LLAMA_SERVER or the binary
     bench/llm/build_llama_server.sh builds; `-np` = --max-seqs parallel slots, continuous
     batching, `-c` 2048 tokens per slot, --threads threads, the same GGUF; the client sends
     the same requests: temperature 0, ignore_eos, --max-tokens) when it exists, else
     llama-cpp-python's server (the same llama.cpp revision) through bench/llm/llama_cpp_server.py,
     which turns off the CPU weight repacking that crashes on this CPU,

in one run. For cinfer it first measures the capacity under the SLO (admitted requests/s whose
e2e p99 stays within --slo-s) at decreasing think times, then offers 150% of that capacity and
reports that the admitted requests' p99 stays within the SLO while the excess is refused.

Each level reports admitted req/s, TTFT and e2e p50/p99, refused requests and the time to refuse
them (p50/p99), the servers' peak RSS (VmHWM), the prefix-cache hit rate over the level (from
/metrics), and the machine's load average. Writes DIR/results.json, DIR/table.md and SVG plots.

  build/venv/bin/python bench/llm/bench_chat_users.py --out /tmp/chat512      # ~12 minutes
  # only cinfer x1 against llama-server at one think time, alternating, 2 rounds (~4 minutes):
  build/venv/bin/python bench/llm/bench_chat_users.py --compare 120 --rounds 2 \
      --llama-server /path/to/llama-server --out /tmp/chat512-vs-llama
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("CINFER_BIN", os.path.join(ROOT, "build/src/cli/cinfer"))
PY = sys.executable


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gguf():
    p = os.path.join(ROOT, "examples/model_repository/smollm2/1/model.gguf")
    return os.path.realpath(p)


def wait_http(url, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} never answered")


def vmhwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def metrics(url):
    out = {}
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    except Exception:
        return out
    for line in text.splitlines():
        m = re.match(r'(cinfer_llm_[a-z_]+)\{model="smollm2"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class Proc:
    def __init__(self, cmd, log, env=None):
        self.log = open(log, "w")
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def cinfer_repo(threads, max_seqs, max_waiting, kv):
    repo = tempfile.mkdtemp(prefix="chat-users-")
    os.makedirs(os.path.join(repo, "smollm2/1"))
    os.symlink(gguf(), os.path.join(repo, "smollm2/1/model.gguf"))
    with open(os.path.join(repo, "smollm2/config.pbtxt"), "w") as f:
        f.write('name: "smollm2"\nbackend: "llm"\nmax_batch_size: 0\n')
        for k, v in (("ctx_len", 2048), ("max_seqs", max_seqs), ("max_waiting", max_waiting),
                     ("threads", threads), ("kv_cache_memory", kv), ("max_step_tokens", 256)):
            f.write('parameters { key: "%s" value: { string_value: "%s" } }\n' % (k, v))
    return repo


def start_cinfer(args, threads, out, tag):
    port = free_port()
    repo = cinfer_repo(threads, args.max_seqs, args.max_waiting, args.kv_cache_memory)
    p = Proc([BIN, "serve", "--model-repository", repo, "--host", "127.0.0.1", "--http-port", str(port),
              "--grpc-port", "off", "--threads", str(threads)], os.path.join(out, f"{tag}.log"))
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/v2/health/ready")
    return p, url


def llama_server_path(args):
    return args.llama_server or os.environ.get("LLAMA_SERVER") or os.path.join(ROOT, "build/llama.cpp/bin/llama-server")


def start_llama(args, out, tag):
    """llama.cpp on the same GGUF: its own `llama-server` (parallel slots = cinfer's max_seqs,
    continuous batching, a context of 2048 tokens per slot like cinfer's ctx_len, the same
    threads) when built, else llama-cpp-python's server. Returns (kind, Proc, url)."""
    port = free_port()
    ls = llama_server_path(args)
    if os.access(ls, os.X_OK):
        t = args.llama_threads or args.threads
        kind = f"llama-server -np {args.max_seqs} ({t} thread{'s' if t > 1 else ''})"
        cmd = [ls, "-m", gguf(), "-a", "smollm2", "--host", "127.0.0.1", "--port", str(port), "-t", str(t),
               "-tb", str(t), "-c", str(2048 * args.max_seqs), "-np", str(args.max_seqs), "--cont-batching"] + args.llama_args.split()
        ready = "/health"
    else:
        t = args.llama_threads or 1
        kind = f"llama-cpp-python server ({t} thread{'s' if t > 1 else ''})"
        cmd = [PY, os.path.join(ROOT, "bench/llm/llama_cpp_server.py"), "--model", gguf(), "--host", "127.0.0.1",
               "--port", str(port), "--n_threads", str(t), "--n_threads_batch",
               str(t), "--n_ctx", "2048", "--chat_format", "chatml", "--model_alias", "smollm2",
               "--interrupt_requests", "False"]  # its default cuts a running stream for each new request
        ready = "/v1/models"
    p = Proc(cmd, os.path.join(out, f"{tag}.log"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + ready, 180)
    except Exception:
        p.stop()
        raise
    return kind, p, url


def compare(args, res):
    """--compare THINK: cinfer x1 and llama.cpp alone at one think time, alternating which goes
    first, --rounds times: the same workload in the same run, each against the same load."""
    think = int(args.compare * 1000)
    for rnd in range(args.rounds):
        order = ["cinfer", "llama"] if rnd % 2 == 0 else ["llama", "cinfer"]
        for who in order:
            if who == "cinfer":
                srv, url = start_cinfer(args, args.threads, args.out, f"cmp{rnd}_cinfer")
                kind = "cinfer x1"
            else:
                kind, srv, url = start_llama(args, args.out, f"cmp{rnd}_llama")
            try:
                r = bench_level(args, url, think, f"cmp{rnd}_{who}", args.out, [srv.p.pid],
                                [url] if who == "cinfer" else [])
                r["server"] = kind
                r["round"] = rnd
                res["levels"].append(r)
            finally:
                srv.stop()


def bench_level(args, url, think_ms, label, out, pids, metric_urls, users=None):
    users = users or args.users
    js = os.path.join(out, f"{label}.json")
    before = [metrics(u) for u in metric_urls]
    load0 = os.getloadavg()
    cmd = [BIN, "bench", "--url", url, "--openai", "chat", "--model", "smollm2", "--conversation",
           "--concurrency", str(users), "--think-ms", str(think_ms), "--turns", str(args.turns),
           "--max-tokens", str(args.max_tokens), "--prompt-len", str(args.prompt_len),
           "--system-prompt-len", str(args.system_len), "--stream", "--warmup-ms", str(args.warmup_s * 1000),
           "--window-ms", str(args.window_s * 1000), "--max-windows", "3", "--timeout-ms",
           str(args.timeout_s * 1000), "--threads", "1", "--json", js]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(os.path.join(out, f"{label}.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n\n" + p.stdout + p.stderr)
    load1 = os.getloadavg()
    after = [metrics(u) for u in metric_urls]
    lv = {}
    if os.path.exists(js):
        levels = json.load(open(js)).get("levels") or [{}]
        lv = levels[0]
    m = re.search(r"cinfer bench: (.*)", p.stderr)
    hits = sum(a.get("cinfer_llm_prefix_cache_hits_total", 0) - b.get("cinfer_llm_prefix_cache_hits_total", 0)
               for a, b in zip(after, before))
    queries = sum(a.get("cinfer_llm_prefix_cache_queries_total", 0) -
                  b.get("cinfer_llm_prefix_cache_queries_total", 0) for a, b in zip(after, before))
    preempt = sum(a.get("cinfer_llm_preemptions_total", 0) - b.get("cinfer_llm_preemptions_total", 0)
                  for a, b in zip(after, before))
    srv_refused = sum(a.get("cinfer_llm_refused_waiting_total", 0) - b.get("cinfer_llm_refused_waiting_total", 0)
                      for a, b in zip(after, before))
    ms = lambda d, k: d.get(k, 0) / 1000.0 if d and d.get("count") else None
    r = {
        "label": label, "think_s": think_ms / 1000.0, "users": users, "rc": p.returncode,
        "wall_s": round(time.time() - t0, 1),
        "offered_rps": users / (think_ms / 1000.0 + (lv.get("latency", {}).get("mean_us", 0) / 1e6)) if think_ms else None,
        "admitted_rps": lv.get("throughput_rps"), "requests": lv.get("requests"),
        "ttft_p50_ms": ms(lv.get("ttft"), "p50_us"), "ttft_p99_ms": ms(lv.get("ttft"), "p99_us"),
        "e2e_p50_ms": ms(lv.get("latency"), "p50_us"), "e2e_p99_ms": ms(lv.get("latency"), "p99_us"),
        "refused": lv.get("refused", {}).get("count", 0),
        "refused_rps": (lv.get("refused", {}).get("count", 0) / lv["duration_s"]) if lv.get("duration_s") else 0,
        "refusal_p50_ms": ms(lv.get("refused"), "p50_us"), "refusal_p99_ms": ms(lv.get("refused"), "p99_us"),
        "errors_other": (lv.get("errors", 0) - lv.get("refused", {}).get("count", 0)) if lv else None,
        "errors_by_kind": lv.get("errors_by_kind"), "http_status_errors": lv.get("http_status_errors"),
        "output_tokens_per_s": lv.get("output_tokens_per_s"),
        "bench_message": m.group(1) if m else None,
        "out_tokens_per_req": (lv.get("output_tokens", 0) / lv["requests"]) if lv.get("requests") else None,
        "prompt_tokens_per_req": (lv.get("prompt_tokens", 0) / lv["requests"]) if lv.get("requests") else None,
        "prefix_hit_rate": hits / queries if queries else None, "preemptions": preempt,
        "server_refused": srv_refused,
        "peak_rss_mib": round(sum(vmhwm_kb(pid) for pid in pids) / 1024.0, 1),
        "load_avg_before": [round(x, 2) for x in load0], "load_avg_after": [round(x, 2) for x in load1],
    }
    print(json.dumps(r), flush=True)
    return r


def svg_plot(path, title, series, xlabel, ylabel, slo=None):
    """A small line chart: series = [(name, [(x, y), ...])]."""
    W, H, L, B, T, R = 640, 360, 70, 50, 40, 170
    pts = [p for _, s in series for p in s if p[1] is not None]
    if not pts:
        return
    xmax = max(p[0] for p in pts) * 1.1 or 1
    ymax = max([p[1] for p in pts] + ([slo] if slo else [])) * 1.15 or 1
    X = lambda x: L + (W - L - R) * x / xmax
    Y = lambda y: H - B - (H - B - T) * y / ymax
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">{xlabel}</text>',
         f'<text x="16" y="{(T+H-B)/2}" text-anchor="middle" transform="rotate(-90 16 {(T+H-B)/2})">{ylabel}</text>']
    for i in range(6):
        yv = ymax * i / 5
        o.append(f'<text x="{L-6}" y="{Y(yv)+4}" text-anchor="end">{yv:.3g}</text>')
        xv = xmax * i / 5
        o.append(f'<text x="{X(xv)}" y="{H-B+16}" text-anchor="middle">{xv:.3g}</text>')
    if slo:
        o.append(f'<line x1="{L}" y1="{Y(slo)}" x2="{W-R}" y2="{Y(slo)}" stroke="gray" stroke-dasharray="5,4"/>')
        o.append(f'<text x="{W-R+4}" y="{Y(slo)+4}" fill="gray">SLO</text>')
    for k, (name, s) in enumerate(series):
        s = [p for p in s if p[1] is not None]
        c = colors[k % len(colors)]
        if len(s) > 1:
            o.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' %
                     (c, " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s)))
        for x, y in s:
            o.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="3.5" fill="{c}"/>')
        o.append(f'<rect x="{W-R+10}" y="{T+18*k}" width="12" height="12" fill="{c}"/>')
        o.append(f'<text x="{W-R+28}" y="{T+18*k+10}">{name}</text>')
    o.append(f'<text x="{W-6}" y="{H-4}" text-anchor="end" fill="gray" font-size="10">noisy: shared 2-core machine</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/chat-users")
    ap.add_argument("--users", type=int, default=512)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=8, help="words per user question")
    ap.add_argument("--system-len", type=int, default=48, help="words of the shared system prompt")
    ap.add_argument("--think-s", default="480,240,160,120", help="capacity search: think times (s), slowest first")
    ap.add_argument("--slo-s", type=float, default=8.0, help="SLO: admitted e2e p99 (s)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-seqs", type=int, default=8)
    ap.add_argument("--max-waiting", type=int, default=4)
    ap.add_argument("--kv-cache-memory", default="256MiB")
    ap.add_argument("--warmup-s", type=int, default=20)
    ap.add_argument("--window-s", type=int, default=15)
    ap.add_argument("--timeout-s", type=int, default=60)
    ap.add_argument("--small-users", type=int, default=64,
                    help="also run cinfer x1 and llama.cpp with this many users at the same offered rate (0: no)")
    ap.add_argument("--skip", default="", help="comma list of: replicas, llama, 150pct")
    ap.add_argument("--llama-threads", type=int, default=0,
                    help="llama.cpp threads (default: --threads for llama-server, 1 for llama-cpp-python's "
                         "server: on a loaded 2-core machine ggml's spinning thread barrier made its 2 threads "
                         "15-40x slower than 1)")
    ap.add_argument("--llama-server", help="the llama-server binary (default $LLAMA_SERVER, else "
                    "build/llama.cpp/bin/llama-server from bench/llm/build_llama_server.sh)")
    ap.add_argument("--llama-args", default="--no-repack",
                    help="more llama-server arguments (default --no-repack: with its CPU weight repacking the "
                         "native build dies of a general protection fault at start-up on this AMX CPU, like "
                         "the wheel's; '' to keep repacking)")
    ap.add_argument("--compare", type=float, default=0, metavar="THINK_S",
                    help="only cinfer x1 against llama.cpp at this think time, alternating, --rounds times")
    ap.add_argument("--rounds", type=int, default=2, help="with --compare: rounds")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    res = {"args": vars(args), "cpus": os.cpu_count(), "levels": []}
    if args.compare:
        compare(args, res)
        return report(args, res)

    # 1. one server: capacity under the SLO, then 150% of it
    srv, url = start_cinfer(args, args.threads, args.out, "cinfer1")
    try:
        best = None
        for t in [float(x) for x in args.think_s.split(",")]:
            r = bench_level(args, url, int(t * 1000), f"cinfer1_think{int(t)}", args.out, [srv.p.pid], [url])
            r["server"] = "cinfer x1"
            res["levels"].append(r)
            if r["e2e_p99_ms"] is not None and r["e2e_p99_ms"] <= args.slo_s * 1000 and r["admitted_rps"]:
                if not best or r["admitted_rps"] > best["admitted_rps"]:
                    best = r
        if not best:
            best = min(res["levels"], key=lambda r: r["e2e_p99_ms"] or 1e18)
        cap = best["admitted_rps"]
        res["capacity_rps"] = cap
        res["capacity_think_s"] = best["think_s"]
        lat = (best["e2e_p50_ms"] or 0) / 1000.0
        think150 = max(1.0, args.users / (1.5 * cap) - lat)
        if "150pct" not in skip:
            r = bench_level(args, url, int(think150 * 1000), "cinfer1_150pct", args.out, [srv.p.pid], [url])
            r["server"] = "cinfer x1"
            r["offered_vs_capacity"] = 1.5
            res["levels"].append(r)
    finally:
        srv.stop()
    capacity_think = int(res["capacity_think_s"] * 1000)

    # 2. two replicas (one thread each) behind the gateway, at the capacity point and at 150%
    if "replicas" not in skip:
        reps = [start_cinfer(args, max(1, args.threads // 2), args.out, f"cinfer2_{i}") for i in range(2)]
        gport = free_port()
        # A replica's 503 with Retry-After (its engine queue is full) is a refusal, retried once
        # on the other replica and never counted toward ejection: the default outlier settings.
        gcfg = os.path.join(args.out, "gateway.json")
        with open(gcfg, "w") as f:
            json.dump({}, f)
        gw = Proc([BIN, "gateway", "--config", gcfg, "--host", "127.0.0.1", "--port", str(gport)] +
                  sum((["--upstream", u.replace("http://", "")] for _, u in reps), []),
                  os.path.join(args.out, "gateway.log"))
        gurl = f"http://127.0.0.1:{gport}"
        try:
            wait_http(gurl + "/v1/models")
            pids = [p.p.pid for p, _ in reps] + [gw.p.pid]
            for think, lab in ((capacity_think, "cinfer2_capacity"), (int(think150 * 1000), "cinfer2_150pct")):
                r = bench_level(args, gurl, think, lab, args.out, pids, [u for _, u in reps])
                r["server"] = "cinfer x2 + gateway"
                # the replicas' refusals the gateway saw (503 + Retry-After: not failures) and its ejections
                try:
                    text = urllib.request.urlopen(gurl + "/metrics", timeout=10).read().decode()
                except Exception:
                    text = ""
                for name in ("cinfer_gateway_upstream_refusals_total", "cinfer_gateway_ejections_total",
                             "cinfer_gateway_retries_total"):
                    r[name] = sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + "{"))
                res["levels"].append(r)
        finally:
            gw.stop()
            for p, _ in reps:
                p.stop()

    # 3. llama.cpp at the capacity point; and both servers at the same offered rate with fewer
    #    users (--small-users), where llama-cpp-python's server can hold the connections
    small = args.small_users
    small_think = int(capacity_think * small / args.users)
    if small and "llama" not in skip:
        srv, url = start_cinfer(args, args.threads, args.out, "cinfer1_small")
        try:
            r = bench_level(args, url, small_think, f"cinfer1_{small}users", args.out, [srv.p.pid], [url],
                            users=small)
            r["server"] = "cinfer x1"
            res["levels"].append(r)
        finally:
            srv.stop()
    if "llama" not in skip:
        kind, lp, lurl = start_llama(args, args.out, "llama")
        try:
            r = bench_level(args, lurl, capacity_think, "llama_capacity", args.out, [lp.p.pid], [])
            r["server"] = kind
            res["levels"].append(r)
            if small:
                r = bench_level(args, lurl, small_think, f"llama_{small}users", args.out,
                                [lp.p.pid], [], users=small)
                r["server"] = kind
                res["levels"].append(r)
        finally:
            lp.stop()
        res["llama_kind"] = kind
    report(args, res)


def report(args, res):
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    rows = ["| server | level | users | think s | admitted req/s | TTFT p50 / p99 ms | e2e p50 / p99 ms | refused (req/s) |"
            " refusal p50 / p99 ms | other errors | prefix hits | preempt | peak RSS MiB | load avg |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f1 = lambda v, n=1: "-" if v is None else f"{v:.{n}f}"
    for r in res["levels"]:
        rows.append(f"| {r['server']} | {r['label']} | {r['users']} | {r['think_s']:.0f} | {f1(r['admitted_rps'], 2)} | "
                    f"{f1(r['ttft_p50_ms'], 0)} / {f1(r['ttft_p99_ms'], 0)} | {f1(r['e2e_p50_ms'], 0)} / "
                    f"{f1(r['e2e_p99_ms'], 0)} | {r['refused']} ({f1(r['refused_rps'], 2)}) | "
                    f"{f1(r['refusal_p50_ms'], 2)} / {f1(r['refusal_p99_ms'], 2)} | {r['errors_other']} | "
                    f"{'-' if r['prefix_hit_rate'] is None else '%.0f%%' % (100 * r['prefix_hit_rate'])} | "
                    f"{r['preemptions']:.0f} | {r['peak_rss_mib']} | {r['load_avg_after'][0]} |")
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write("\n".join(rows) + "\n")
    print("\n".join(rows))
    if args.compare:
        by = {}
        for r in res["levels"]:
            by.setdefault(r["server"], []).append(r)
        svg_plot(os.path.join(args.out, "chat_users_compare_latency.svg"),
                 f"{args.users} users, think {args.compare:g} s: e2e p50 / p99 per round",
                 [(f"{k} {q}", [(r["round"] + 1, (r[f"e2e_{q}_ms"] or 0) / 1000) for r in v])
                  for k, v in by.items() for q in ("p50", "p99")], "round", "seconds", slo=args.slo_s)
        svg_plot(os.path.join(args.out, "chat_users_compare_rps.svg"),
                 f"{args.users} users, think {args.compare:g} s: admitted req/s per round",
                 [(k, [(r["round"] + 1, r["admitted_rps"] or 0) for r in v]) for k, v in by.items()],
                 "round", "requests/s")
        return
    c1 = [r for r in res["levels"] if r["server"] == "cinfer x1" and r["users"] == args.users]
    svg_plot(os.path.join(args.out, "chat_users_latency.svg"),
             f"{args.users} users: admitted e2e p99 vs offered load (cinfer x1)",
             [("e2e p99 (s)", [(r["offered_rps"] or 0, (r["e2e_p99_ms"] or 0) / 1000) for r in c1]),
              ("TTFT p99 (s)", [(r["offered_rps"] or 0, (r["ttft_p99_ms"] or 0) / 1000) for r in c1])],
             "offered requests/s", "seconds", slo=args.slo_s)
    svg_plot(os.path.join(args.out, "chat_users_admission.svg"),
             f"{args.users} users: admitted and refused req/s vs offered (cinfer x1)",
             [("admitted/s", [(r["offered_rps"] or 0, r["admitted_rps"] or 0) for r in c1]),
              ("refused/s", [(r["offered_rps"] or 0, r["refused_rps"]) for r in c1])],
             "offered requests/s", "requests/s")


if __name__ == "__main__":
    main()
