#!/usr/bin/env python3
"""soak.py: the server core under model churn (issue 15). Not a timed test: a benchmark that
prints figures and exits non-zero when the server failed a request it should have answered.

For DURATION seconds (default 60):
  - CLIENTS client threads (default 8) send requests round-robin: KServe HTTP inference of
    `identity` (tritonclient.http, checked element by element), KServe inference of
    `identity_int32`, and OpenAI chat completions of `smollm2` (the openai package, greedy,
    a few tokens, streamed every other time);
  - a control thread reloads `identity` every RELOAD_MS (default 200 ms) through
    POST /v2/repository/models/identity/load;
  - another control thread unloads and loads `identity_pair` in turn; a client probes it and
    counts its answers: 200 while loaded, a clean 4xx/503 while not (anything else — a 5xx
    other than 503, a dropped connection — is a failure).
Every second the server's RSS is sampled (/proc/PID/status VmRSS). At the end: requests per
kind, failures (must be 0), reloads done, peak RSS of the first 10 s and of the whole run and
their ratio (target <= 1.10), and whether the process is still alive and exits 0 on SIGTERM.

Usage: bench/soak/soak.py [--duration S] [--clients N] [--reload-ms MS] [--bin PATH]
  (CINFER_BIN also names the binary; an ASan build: --bin build-asan/src/cli/cinfer)
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import tritonclient.http as httpclient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def post(url, body=b"", timeout=60):
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--reload-ms", type=float, default=200)
    ap.add_argument("--bin", default=os.environ.get("CINFER_BIN",
                                                    os.path.join(ROOT, "build/src/cli/cinfer")))
    ap.add_argument("--repo", default=os.path.join(ROOT, "examples/model_repository"))
    a = ap.parse_args()

    cmd = [a.bin, "serve", "--model-repository", a.repo, "--host", "127.0.0.1", "--http-port", "0",
           "--model-control-mode", "explicit", "--load-model", "identity",
           "--load-model", "identity_int32", "--load-model", "identity_pair",
           "--load-model", "smollm2", "--exit-timeout-secs", "30"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log, port = [], None
    for line in proc.stdout:
        log.append(line)
        m = re.search(r"http_port=(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("cinfer did not start:\n" + "".join(log))
    threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if urllib.request.urlopen(base + "/v2/health/ready", timeout=5).status == 200:
                break
        except Exception:
            time.sleep(0.1)

    import openai
    stop = threading.Event()
    lock = threading.Lock()
    counts = {"kserve_fp32": 0, "kserve_int32": 0, "openai": 0, "openai_stream": 0,
              "probe_loaded": 0, "probe_unloaded": 0}
    failures = []
    reloads = {"identity": 0, "identity_pair_cycles": 0}

    def fail(what):
        if proc.poll() is not None:
            stop.set()  # the server is gone: every further request would fail the same way
        with lock:
            if len(failures) < 50:
                failures.append(what)
            else:
                failures.append(None)

    def client(idx):
        kc = httpclient.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120)
        oc = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=120, max_retries=0)
        rng = np.random.default_rng(idx)
        k = idx
        while not stop.is_set():
            k += 1
            kind = k % 4
            try:
                if kind in (0, 1):
                    model, dt, npdt = (("identity", "FP32", np.float32) if kind == 0
                                       else ("identity_int32", "INT32", np.int32))
                    x = (rng.random((1, 16)) * 100).astype(npdt)
                    inp = httpclient.InferInput("INPUT0", list(x.shape), dt)
                    inp.set_data_from_numpy(x, binary_data=bool(k % 2))
                    out = kc.infer(model, [inp]).as_numpy("OUTPUT0")
                    if out is None or not np.array_equal(out, x):
                        fail(f"{model}: wrong output")
                    else:
                        with lock:
                            counts["kserve_fp32" if kind == 0 else "kserve_int32"] += 1
                elif kind == 2:
                    msgs = [{"role": "user", "content": f"Count to {idx % 5 + 2}."}]
                    if k % 8 == 2:
                        text = "".join(c.choices[0].delta.content or "" for c in
                                       oc.chat.completions.create(model="smollm2", messages=msgs,
                                                                  max_tokens=8, temperature=0,
                                                                  stream=True) if c.choices)
                        key = "openai_stream"
                    else:
                        r = oc.chat.completions.create(model="smollm2", messages=msgs,
                                                       max_tokens=8, temperature=0)
                        text, key = r.choices[0].message.content, "openai"
                    if not text:
                        fail("openai: empty completion")
                    else:
                        with lock:
                            counts[key] += 1
                else:
                    body = json.dumps({"inputs": [
                        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
                        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 4], "data": [5, 6, 7, 8]}]})
                    code, out = post(base + "/v2/models/identity_pair/infer", body.encode())
                    if code == 200:
                        got = {o["name"]: o["data"] for o in json.loads(out)["outputs"]}
                        if got != {"OUTPUT0": [1, 2, 3, 4], "OUTPUT1": [5, 6, 7, 8]}:
                            fail(f"identity_pair: wrong outputs {got}")
                        with lock:
                            counts["probe_loaded"] += 1
                    elif code in (404, 503):  # not loaded at that moment: a clean refusal
                        with lock:
                            counts["probe_unloaded"] += 1
                    else:
                        fail(f"identity_pair probe: HTTP {code}")
            except Exception as e:  # a dropped connection, a 5xx from tritonclient, ...
                fail(f"kind {kind}: {type(e).__name__}: {e}"[:300])
        kc.close()

    def reloader():
        while not stop.is_set():
            code, body = post(base + "/v2/repository/models/identity/load")
            if code != 200:
                fail(f"reload identity: HTTP {code} {body[:200]!r}")
            else:
                reloads["identity"] += 1
            stop.wait(a.reload_ms / 1000)

    def cycler():
        while not stop.is_set():
            for op in ("unload", "load"):
                code, body = post(base + f"/v2/repository/models/identity_pair/{op}")
                if code != 200:
                    fail(f"{op} identity_pair: HTTP {code} {body[:200]!r}")
                stop.wait(a.reload_ms / 1000)
            reloads["identity_pair_cycles"] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    threads += [threading.Thread(target=reloader), threading.Thread(target=cycler)]
    t0 = time.time()
    for t in threads:
        t.start()
    samples = []
    while time.time() - t0 < a.duration:
        time.sleep(1)
        if proc.poll() is not None:
            fail(f"server exited with {proc.returncode}")
            break
        samples.append((time.time() - t0, rss_kb(proc.pid)))
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    alive = proc.poll() is None
    rc = proc.returncode
    if alive:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "hung"
    first = max([r for t, r in samples if t <= 10] or [0])
    peak = max([r for _, r in samples] or [0])
    total = sum(counts.values())
    print(f"soak: {a.clients} clients, {elapsed:.0f} s, reload every {a.reload_ms:.0f} ms, "
          f"binary {a.bin}")
    print("requests: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + f"; total {total} "
          f"({total / elapsed:.0f}/s)")
    print(f"reloads of identity: {reloads['identity']}; unload+load cycles of identity_pair: "
          f"{reloads['identity_pair_cycles']}")
    print(f"RSS peak first 10 s: {first / 1024:.1f} MiB; peak overall: {peak / 1024:.1f} MiB; "
          f"ratio {peak / first if first else float('nan'):.3f} (target <= 1.10)")
    print(f"server alive at the end: {alive}; exit status on SIGTERM: {rc}")
    nfail = len(failures)
    print(f"failed requests: {nfail}")
    for f in failures[:20]:
        if f:
            print("  " + f)
    bad = nfail or not alive or rc != 0 or (first and peak > first * 1.10)
    san = [l for l in log if "Sanitizer" in l or "runtime error" in l]
    if san:
        print("sanitizer reports:\n" + "".join(san[:20]))
        bad = True
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
