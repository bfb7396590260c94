#!/usr/bin/env python3
"""bench_serving_vs_llamacpp.py: cinfer's OpenAI server vs llama.cpp's own server
(`llama-server`, parallel slots + continuous batching) on the same GGUF, the same machine and
the same compute thread count, in one run.

For each concurrency level C (default 1, 4, 16, 64) and each server in turn (cinfer first,
then llama.cpp, so both see the same machine load), the script:
  1. starts the server fresh: cinfer serve on a temporary model repository (llm backend,
     max_seqs >= C, ctx_len = --ctx-per-stream, threads T); llama-server with -t T -tb T,
     --parallel C, -c C * ctx-per-stream, --cont-batching;
  2. sends one warm-up request (page-faults the weights, fills the prompt caches alike);
  3. drives /v1/completions with `cinfer bench --openai completions --stream` (the SAME
     client, same prompts, temperature 0, max_tokens N with ignore_eos so both servers
     generate exactly N tokens per request), C connections in a closed loop,
     max(--requests-per-stream x C, --min-requests) requests in all;
  4. reads the peak RSS of the server process (VmHWM in /proc/PID/status) and stops it.
It reports aggregate output tokens/s, TTFT p50/p99, inter-token latency p50/p99, peak RSS and
the cinfer/llama.cpp ratios; writes everything as JSON and three SVG charts
(PREFIX-throughput.svg, PREFIX-ttft.svg, PREFIX-itl.svg). The servers' own load on the
machine matters: the 1-minute load average before and after each run is recorded.

Usage:
  bench/llm/build_llama_server.sh            # once (bench-only; builds build/llama.cpp/bin/llama-server)
  build/venv/bin/python bench/llm/bench_serving_vs_llamacpp.py --threads 2 \\
      --concurrency 1,4,16,64 --max-tokens 64 --requests-per-stream 2 \\
      --json build/bench-serving-llm.json --plot-prefix docs/plots/llm-serving
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=120):
    """Polls GET url until it answers 200 (bounded; fails if the process exits)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def warmup(base, model, max_tokens):
    body = json.dumps({"model": model, "prompt": "Please write a long story.", "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.load(r)
    n = out.get("usage", {}).get("completion_tokens")
    if n != max_tokens:
        raise RuntimeError(f"warm-up: {base} generated {n} tokens, asked for {max_tokens} with ignore_eos")


def start_cinfer(a, model, conc, tmp, log):
    repo = os.path.join(tmp, "repo")
    shutil.rmtree(repo, ignore_errors=True)
    os.makedirs(os.path.join(repo, "smollm2", "1"))
    os.symlink(model, os.path.join(repo, "smollm2", "1", "model.gguf"))
    params = {"ctx_len": a.ctx_per_stream, "max_seqs": max(64, conc), "max_step_tokens": a.max_step_tokens,
              "threads": a.threads}
    with open(os.path.join(repo, "smollm2", "config.pbtxt"), "w") as f:
        f.write('name: "smollm2"\nbackend: "llm"\nmax_batch_size: 0\n')
        for k, v in params.items():
            f.write(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n')
    port = free_port()
    proc = subprocess.Popen([a.cinfer, "serve", "--model-repository", repo, "--host", "127.0.0.1",
                             "--http-port", str(port), "--threads", str(a.threads)],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base + "/v2/health/ready", proc)
    return proc, base, "smollm2", {"config": params}


def start_llama(a, model, conc, tmp, log):
    port = free_port()
    cmd = [a.llama_server, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(a.threads),
           "-tb", str(a.threads), "--parallel", str(conc), "-c", str(conc * a.ctx_per_stream), "--cont-batching",
           "--no-webui", "-a", "smollm2"] + a.llama_args.split()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base + "/health", proc)
    return proc, base, "smollm2", {"argv": cmd[1:]}


def run_bench(a, base, model, conc, out_json):
    n_req = max(conc * a.requests_per_stream, a.min_requests)
    cmd = [a.cinfer, "bench", "--url", base, "--openai", "completions", "--model", model, "--stream",
           "--max-tokens", str(a.max_tokens), "--prompt-len", str(a.prompt_len), "--concurrency", str(conc),
           "--requests", str(n_req), "--timeout-ms", "600000", "--threads", "1", "--json", out_json]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cinfer bench failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    with open(out_json) as f:
        lv = json.load(f)["levels"][0]
    us = lambda d, k: d[k] / 1000.0
    return {"requests": lv.get("requests", n_req), "errors": lv["errors"],
            "output_tokens": lv["output_tokens"], "output_tok_s": lv["output_tokens_per_s"],
            "ttft_p50_ms": us(lv["ttft"], "p50_us"), "ttft_p99_ms": us(lv["ttft"], "p99_us"),
            "itl_p50_ms": us(lv["itl"], "p50_us"), "itl_p99_ms": us(lv["itl"], "p99_us"),
            "command": " ".join(cmd)}


def svg_chart(path, title, ylabel, series, log_y=False):
    """Line chart, x = concurrency (log2 axis); series = {label: (color, dash, [(x, y)])}."""
    W, H, L, R, T, B = 680, 380, 70, 170, 34, 44
    xs = sorted({x for _, _, pts in series.values() for x, _ in pts})
    ys = [y for _, _, pts in series.values() for _, y in pts if y > 0]
    x0, x1 = math.log2(xs[0]), math.log2(xs[-1])
    if log_y:
        y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        fy = lambda v: (math.log10(max(v, 10 ** y0)) - y0) / max(y1 - y0, 1e-9)
        ticks = [10 ** e for e in range(y0, y1 + 1)]
    else:
        step = 10 ** math.floor(math.log10(max(ys) / 5))  # 5-ish ticks at 1, 2 or 5 x 10^k
        step = next(m * step for m in (1, 2, 5, 10) if max(ys) * 1.05 <= 5 * m * step)
        top = step * math.ceil(max(ys) * 1.05 / step)
        fy = lambda v: v / top
        ticks = [step * i for i in range(int(round(top / step)) + 1)]
    px = lambda x: L + (math.log2(x) - x0) / max(x1 - x0, 1e-9) * (W - L - R)
    py = lambda v: H - B - fy(v) * (H - B - T)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{(W - R + L) / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(W - R + L) / 2}" y="{H - 8}" text-anchor="middle">concurrent streams</text>',
         f'<text x="14" y="{(H - B + T) / 2}" transform="rotate(-90 14 {(H - B + T) / 2})" '
         f'text-anchor="middle">{ylabel}</text>']
    for x in xs:
        o.append(f'<text x="{px(x):.1f}" y="{H - B + 14}" text-anchor="middle">{x}</text>')
    for v in ticks:
        o.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - R}" y2="{py(v):.1f}" stroke="#eee"/>')
        o.append(f'<text x="{L - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for i, (label, (color, dash, pts)) in enumerate(series.items()):
        d = ' stroke-dasharray="5,3"' if dash else ""
        o.append(f'<polyline points="{" ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)}" fill="none" '
                 f'stroke="{color}" stroke-width="2"{d}/>')
        for x, y in pts:
            o.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"><title>{label} '
                     f'@{x}: {y:.4g}</title></circle>')
        o.append(f'<line x1="{W - R + 10}" y1="{T + 10 + 16 * i}" x2="{W - R + 34}" y2="{T + 10 + 16 * i}" '
                 f'stroke="{color}" stroke-width="2"{d}/>')
        o.append(f'<text x="{W - R + 40}" y="{T + 14 + 16 * i}">{label}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="GGUF file (default: scripts/find_smollm2.sh)")
    ap.add_argument("--threads", type=int, default=2, help="compute threads for both servers")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (ignore_eos)")
    ap.add_argument("--prompt-len", type=int, default=32, help="prompt words (cinfer bench --prompt-len)")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--min-requests", type=int, default=8, help="at least this many requests per level")
    ap.add_argument("--ctx-per-stream", type=int, default=256, help="context per stream/slot for both servers")
    ap.add_argument("--max-step-tokens", type=int, default=512, help="cinfer's per-step token budget")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each level this many times, alternating which server goes first; the tables "
                         "show per-metric medians and the ratio's median and range over the rounds")
    ap.add_argument("--servers", default="cinfer,llama.cpp")
    ap.add_argument("--llama-args", default="", help="extra llama-server flags, e.g. '--kv-unified'")
    ap.add_argument("--cinfer", default=os.path.join(ROOT, "build/src/cli/cinfer"))
    ap.add_argument("--llama-server", default=os.path.join(ROOT, "build/llama.cpp/bin/llama-server"))
    ap.add_argument("--json", default=os.path.join(ROOT, "build/bench-serving-llm.json"))
    ap.add_argument("--plot-prefix", default=None, help="writes PREFIX-throughput.svg and PREFIX-latency.svg")
    ap.add_argument("--keep-logs", action="store_true", help="keep the servers' logs (path printed)")
    ap.add_argument("--replot", metavar="JSON", help="only redraw the plots of an earlier run's JSON")
    a = ap.parse_args()
    if a.replot:
        if not a.plot_prefix:
            ap.error("--replot needs --plot-prefix")
        with open(a.replot) as f:
            plot(json.load(f), a.plot_prefix)
        return 0
    model = a.model or subprocess.run([os.path.join(ROOT, "scripts/find_smollm2.sh")], capture_output=True,
                                      text=True, check=True).stdout.strip()
    model = os.path.realpath(model)
    levels = [int(x) for x in a.concurrency.split(",")]
    servers = a.servers.split(",")
    for s in servers:
        if s not in ("cinfer", "llama.cpp"):
            ap.error(f"--servers: unknown server {s!r}")
    if "llama.cpp" in servers and not os.access(a.llama_server, os.X_OK):
        sys.exit(f"{a.llama_server} not found: run bench/llm/build_llama_server.sh first")
    llama_version = ""
    if "llama.cpp" in servers:
        r = subprocess.run([a.llama_server, "--version"], capture_output=True, text=True)
        llama_version = " ".join((r.stdout + r.stderr).split())
    tmp = tempfile.mkdtemp(prefix="cinfer-llm-serving-")
    results = {"model": model, "threads": a.threads, "max_tokens": a.max_tokens, "prompt_len_words": a.prompt_len,
               "requests_per_stream": a.requests_per_stream, "min_requests": a.min_requests, "ctx_per_stream": a.ctx_per_stream,
               "llama_server_version": llama_version, "client": "cinfer bench --openai completions --stream",
               "cpus": os.cpu_count(), "rounds": a.rounds, "rows": [], "raw_rows": []}
    starters = {"cinfer": start_cinfer, "llama.cpp": start_llama}
    try:
        for conc in levels:
            for rnd in range(a.rounds):
                order = servers if rnd % 2 == 0 else servers[::-1]  # alternate who runs first
                for name in order:
                    log_path = os.path.join(tmp, f"{name}-{conc}-{rnd}.log")
                    with open(log_path, "w") as log:
                        load0 = os.getloadavg()[0]
                        proc, base, mname, info = starters[name](a, model, conc, tmp, log)
                        try:
                            warmup(base, mname, a.max_tokens)
                            row = run_bench(a, base, mname, conc, os.path.join(tmp, f"{name}-{conc}-{rnd}.json"))
                            row["rss_mib"] = vm_hwm_kib(proc.pid) / 1024.0
                        finally:
                            stop(proc)
                    row.update({"server": name, "concurrency": conc, "round": rnd, "loadavg_1m_before": load0,
                                "loadavg_1m_after": os.getloadavg()[0], "server_info": info})
                    results["raw_rows"].append(row)
                    print(f"{name:9s} C={conc:3d} r{rnd}: {row['output_tok_s']:7.1f} out tok/s  TTFT p50 "
                          f"{row['ttft_p50_ms']:8.1f} p99 {row['ttft_p99_ms']:8.1f} ms  ITL p50 {row['itl_p50_ms']:6.1f} "
                          f"p99 {row['itl_p99_ms']:7.1f} ms  RSS {row['rss_mib']:6.1f} MiB  errors {row['errors']}  "
                          f"load {load0:.2f}", flush=True)
            for name in servers:
                rr = [r for r in results["raw_rows"] if r["server"] == name and r["concurrency"] == conc]
                med = {k: statistics.median(r[k] for r in rr) for k in
                       ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "rss_mib")}
                med.update({"server": name, "concurrency": conc, "rounds": len(rr),
                            "errors": sum(r["errors"] for r in rr)})
                results["rows"].append(med)
    finally:
        if a.keep_logs:
            print(f"server logs in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = {(r["server"], r["concurrency"]): r for r in results["rows"]}
    print(f"\nmodel {os.path.basename(model)}, {a.threads} threads, {a.max_tokens} output tokens/request "
          f"(ignore_eos), prompt {a.prompt_len} words, {a.requests_per_stream} requests/stream; "
          f"llama-server: {llama_version}")
    print("| streams | server | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | peak RSS MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for conc in levels:
        for name in servers:
            r = rows[(name, conc)]
            print(f"| {conc} | {name} | {r['output_tok_s']:.1f} | {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
                  f"{r['itl_p50_ms']:.1f} | {r['itl_p99_ms']:.1f} | {r['rss_mib']:.0f} |")
    if len(servers) == 2:
        results["ratios"] = []
        print(f"\n(medians over {a.rounds} round(s); tok/s ratio: median of the per-round ratios, [min, max])")
        print("| streams | tok/s cinfer/llama.cpp | TTFT p50 ratio | ITL p50 ratio | RSS ratio |")
        print("| --- | --- | --- | --- | --- |")
        for conc in levels:
            c, l = rows[("cinfer", conc)], rows[("llama.cpp", conc)]
            per = []
            for rnd in range(a.rounds):
                rc = [r for r in results["raw_rows"] if (r["server"], r["concurrency"], r["round"]) == ("cinfer", conc, rnd)]
                rl = [r for r in results["raw_rows"] if (r["server"], r["concurrency"], r["round"]) == ("llama.cpp", conc, rnd)]
                per.append(rc[0]["output_tok_s"] / rl[0]["output_tok_s"])
            q = {"concurrency": conc, "output_tok_s": statistics.median(per), "output_tok_s_rounds": per,
                 "ttft_p50": c["ttft_p50_ms"] / l["ttft_p50_ms"], "itl_p50": c["itl_p50_ms"] / l["itl_p50_ms"],
                 "rss": c["rss_mib"] / l["rss_mib"]}
            results["ratios"].append(q)
            rng = f" [{min(per):.2f}, {max(per):.2f}]" if len(per) > 1 else ""
            print(f"| {conc} | {q['output_tok_s']:.2f}x{rng} | {q['ttft_p50']:.2f}x | {q['itl_p50']:.2f}x | {q['rss']:.2f}x |")
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(results, f, indent=1)
    if a.plot_prefix:
        plot(results, a.plot_prefix)
    return 0


def plot(results, prefix):
    rows = {(r["server"], r["concurrency"]): r for r in results["rows"]}
    servers = list(dict.fromkeys(r["server"] for r in results["rows"]))
    levels = sorted({r["concurrency"] for r in results["rows"]})
    colors = {"cinfer": "#1f77b4", "llama.cpp": "#d62728"}
    pts = lambda name, k: [(c, rows[(name, c)][k]) for c in levels]
    svg_chart(f"{prefix}-throughput.svg",
              f"Aggregate output tokens/s ({os.path.basename(results['model'])}, {results['threads']} threads)",
              "output tokens/s", {n: (colors[n], False, pts(n, "output_tok_s")) for n in servers})
    lat = {}
    for n in servers:
        lat[f"{n} TTFT p50"] = (colors[n], False, pts(n, "ttft_p50_ms"))
        lat[f"{n} TTFT p99"] = (colors[n], True, pts(n, "ttft_p99_ms"))
    svg_chart(f"{prefix}-ttft.svg", "Time to first token", "ms (log scale)", lat, log_y=True)
    lat = {}
    for n in servers:
        lat[f"{n} ITL p50"] = (colors[n], False, pts(n, "itl_p50_ms"))
        lat[f"{n} ITL p99"] = (colors[n], True, pts(n, "itl_p99_ms"))
    svg_chart(f"{prefix}-itl.svg", "Inter-token latency", "ms (log scale)", lat, log_y=True)
    print(f"plots: {prefix}-throughput.svg, -ttft.svg, -itl.svg")


if __name__ == "__main__":
    sys.exit(main())
