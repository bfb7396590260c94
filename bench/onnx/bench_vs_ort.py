#!/usr/bin/env python3
"""bench_vs_ort.py: cinfer's ONNX engine vs ONNX Runtime (CPU execution provider) on the
same machine, same thread count, same input (test_data_set_0 of each model).

For every model x threads x batch it runs, in separate processes one after the other:
  cinfer:  `cinfer run --model M --test-data-dir SET --threads T --repeat N [--batch B]`
  ORT:     an InferenceSession (ORT_ENABLE_ALL, intra_op_num_threads=T, inter_op 1)
and reports p50 latency per batch, throughput (images/s), the latency ratio
cinfer/ORT and the peak RSS of each process (wait4 ru_maxrss; ORT's includes the Python
interpreter, about 30 MB).

A model whose graph fixes batch 1 (no symbolic batch dimension) cannot take a batch of 8
in ORT: both engines then process the batch as 8 consecutive batch-1 runs (ORT over the 8
rows of one 8-row array, so both engines read the same amount of input memory). cinfer
runs a batch as one call when `cinfer inspect` says the model is batchable.

With --rounds R every model x batch runs R rounds; a round runs, one after the other,
cinfer and ORT at each thread count (1T cinfer, 1T ORT, 2T cinfer, 2T ORT, ...), so the
engines and the thread counts alternate and a slow period of the shared host hits all of
them. The table gives each engine's min and median p50 over the rounds, the median and
range of the per-round ratios (each round's cinfer p50 over the ORT p50 measured right
after it), and for T > 1 cinfer's median T-thread p50 over its median 1-thread p50, then the
median and range of the per-round ratios (each round's T-thread p50 over the 1-thread p50
measured a few seconds before it: a slow minute of the host cancels out of a pair). The
summary counts, besides the cells above 1.0 by the medians, the cells where cinfer lost in
every round (to ORT, or at T threads to itself at 1): two equally fast configurations each
win about half the rounds, so a loss in all R rounds has probability 2^-R under noise alone
(1/32 at --rounds 5), while a per-round median of 1.01 is what noise gives half the time.

--busy [CPU] keeps a busy loop (`taskset -c CPU sh -c 'while :; do :; done'`) running on
that CPU for the whole measurement: the case of another process keeping a core busy. Without
a CPU it takes the other core: the highest-numbered CPU this process may run on (CPU 1 on a
2-core host). Both engines still run on every CPU, so at 2 threads one of their threads
shares a core with the loop; at 1 thread the scheduler may put the engine beside it too.
Run the command once without and once with --busy for the issue's two cases.

Each cell times at least --repeat runs and at least --min-time seconds of them (default 1 s),
for both engines the same way (`cinfer run --min-time`). A window of 20 runs of a 0.3 ms model
is 6 ms, shorter than one scheduler tick (4 ms at HZ=250) plus a time slice, so with a busy
loop on the other core it measured how much CPU time the scheduler still owed a thread that
had slept (EEVDF's lag), not the engine: ORT's SSR-Net gender at 2 threads took 0.38 ms p50
over 20 runs and 0.65 ms over 200, slower than its own 1-thread 0.61
(docs/benchmarks-onnx.md, session 18). --min-time 0 gives the old count-only windows.

Every row ends with the 1-minute load average when its cell finished (/proc/loadavg): on a
shared host read a figure together with it.

Waiting threads (--wait, matters with 2+ threads): ORT's threads spin between operators
by default; `nospin` runs ORT with session.intra_op.allow_spinning=0. cinfer's pool has
one policy (docs/design/onnx.md, "Threads"): workers spin, bounded, within an inference
and sleep between inferences; nothing to set.

usage: bench_vs_ort.py --cinfer build/src/cli/cinfer [--models DIR] [--threads 1 2]
                       [--batch 1 8] [--repeat 20] [--min-time 1.0] [--rounds 1] [--only NAME ...]
                       [--wait default|nospin] [--busy [CPU]] [--ort-daz]
                       [--cinfer-env NAME=VALUE ...]

--ort-daz runs ORT with session.set_denormal_as_zero=1 (FTZ and DAZ on its threads).
cinfer flushes subnormal FP32 weights to 0 when it loads a model and runs its kernels with
FTZ and DAZ set (docs/design/onnx.md, "Loader"); ORT by default computes with subnormal
weights and activations, and x86 cores take microcode assists on them (SSR-Net gender and
MobileFaceNet make thousands; Intel cores pay far more than AMD ones), so without the flag
those models compare a flushing cinfer with a non-flushing ORT. With it both run the same
arithmetic; the figures in docs/benchmarks-onnx.md from session 14 on use it.
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

MODELS = ["retinaface_mnet25_v2", "densenet_expression", "ultraface_rfb320", "mobilefacenet_embedding",
          "ssrnet_age", "ssrnet_gender"]

ORT_CHILD = r"""
import sys, time, numpy as np, onnxruntime as ort
model, inp, threads, batch, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
min_time = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
x = np.load(inp)
so = ort.SessionOptions()
so.intra_op_num_threads = threads
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
if len(sys.argv) > 7 and sys.argv[7] == "daz":
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
if len(sys.argv) > 6 and sys.argv[6] == "nospin":
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
i = s.get_inputs()[0]
fixed = isinstance(i.shape[0], int)
# one buffer of `batch` rows, as cinfer gets it; a fixed-batch-1 model loops over its
# rows (feeding the same 1-row array every time would read it from the cache each time)
rows = np.ascontiguousarray(np.repeat(x, batch, axis=0))
loops = batch if (fixed and batch > 1) else 1
feeds = [rows[k:k + 1] for k in range(batch)] if loops > 1 else [rows]
def once():
    for f in feeds:
        s.run(None, {i.name: f})
once()
lat = []
t0 = time.perf_counter()
c0 = time.process_time()
while len(lat) < repeat or time.perf_counter() - t0 < min_time:
    a = time.perf_counter(); once(); lat.append((time.perf_counter() - a) * 1e3)
tot = time.perf_counter() - t0
cpu = (time.process_time() - c0) * 1e3 / len(lat)
lat.sort()
print("RESULT p50=%.4f thr=%.3f loops=%d cpu=%.4f runs=%d" % (lat[len(lat) // 2], len(lat) * batch / tot, loops, cpu, len(lat)))
"""


def read_tensorproto(path):
    """Minimal TensorProto reader (dims, data_type, raw_data or float_data) -> (dims, floats)."""
    buf = open(path, "rb").read()
    pos, dims, raw, floats = 0, [], None, []

    def varint():
        nonlocal pos
        r = s = 0
        while True:
            b = buf[pos]
            pos += 1
            r |= (b & 0x7F) << s
            s += 7
            if not b & 0x80:
                return r

    while pos < len(buf):
        key = varint()
        field, wt = key >> 3, key & 7
        if wt == 0:
            v = varint()
            if field == 1:
                dims.append(v)
        elif wt == 2:
            n = varint()
            chunk = buf[pos:pos + n]
            pos += n
            if field == 1:  # packed dims
                p2 = 0
                while p2 < len(chunk):
                    r = s = 0
                    while True:
                        b = chunk[p2]
                        p2 += 1
                        r |= (b & 0x7F) << s
                        s += 7
                        if not b & 0x80:
                            break
                    dims.append(r)
            elif field == 9:
                raw = chunk
            elif field == 4:
                floats = list(struct.unpack("<%df" % (len(chunk) // 4), chunk))
        elif wt == 5:
            v = struct.unpack("<f", buf[pos:pos + 4])[0]
            pos += 4
            if field == 4:
                floats.append(v)
        elif wt == 1:
            pos += 8
        else:
            raise ValueError("unsupported wire type %d in %s" % (wt, path))
    if raw is not None:
        floats = list(struct.unpack("<%df" % (len(raw) // 4), raw))
    return dims, floats


def run_measured(cmd, env=None):
    """Runs cmd, returns (stdout, peak RSS in MiB)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), out))
    return out, ru.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--cinfer", default=os.path.join(here, "../../build/src/cli/cinfer"))
    ap.add_argument("--models", default=os.environ.get("CINFER_VISION_MODELS", "/work/shared/models/vision"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=20, help="at least this many timed runs per cell")
    ap.add_argument("--min-time", type=float, default=1.0, metavar="S",
                    help="and at least S seconds of timed runs per cell, for both engines (0: --repeat alone)")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds; best round kept")
    ap.add_argument("--only", nargs="*", default=MODELS)
    ap.add_argument("--python", default=sys.executable, help="python with onnxruntime + numpy")
    ap.add_argument("--ort-daz", action="store_true",
                    help="run ORT with session.set_denormal_as_zero=1, as cinfer runs (FTZ+DAZ)")
    ap.add_argument("--wait", choices=["default", "nospin"], default="default",
                    help="ORT's thread waiting: its default (spin) or allow_spinning=0")
    ap.add_argument("--cinfer-env", action="append", default=[], metavar="NAME=VALUE",
                    help="set this in cinfer's environment (repeatable), e.g. CINFER_ONNX_INTEROP=0")
    ap.add_argument("--busy", type=int, nargs="?", default=None, const=-1, metavar="CPU",
                    help="keep a busy loop on this CPU (default: the other core, the highest CPU allowed) during the measurement")
    args = ap.parse_args()
    cenv = dict(os.environ)
    for kv in args.cinfer_env:
        if "=" not in kv:
            ap.error("--cinfer-env takes NAME=VALUE, got %r" % kv)
        k, v = kv.split("=", 1)
        cenv[k] = v
    import numpy as np  # noqa: F401  (checked early: the ORT child needs it)

    def median(v):
        v = sorted(v)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

    busy = None
    if args.busy is not None and args.busy < 0:
        args.busy = max(os.sched_getaffinity(0))
    if args.busy is not None:
        busy = subprocess.Popen(["taskset", "-c", str(args.busy), "sh", "-c", "while :; do :; done"])
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in args.only:
                mdir = os.path.join(args.models, name)
                model = os.path.join(mdir, "model.onnx")
                setdir = os.path.join(mdir, "test_data_set_0")
                dims, vals = read_tensorproto(os.path.join(setdir, "input_0.pb"))
                npy = os.path.join(tmp, name + ".npy")
                np.save(npy, np.array(vals, dtype=np.float32).reshape(dims))
                for b in args.batch:
                    res = {t: {"c": [], "o": [], "cpu_c": [], "cpu_o": [], "pair": [], "mode": ""} for t in args.threads}
                    for _ in range(max(1, args.rounds)):
                        for t in args.threads:
                            cmd = [args.cinfer, "run", "--model", model, "--test-data-dir", setdir,
                                   "--threads", str(t), "--repeat", str(args.repeat), "--min-time", str(args.min_time)]
                            if b > 1:
                                cmd += ["--batch", str(b)]
                            out, _ = run_measured(cmd, env=cenv)
                            m = re.search(r"p50 ([0-9.]+).*throughput ([0-9.]+).*cpu ([0-9.]+)", out)
                            c_p50, c_cpu = float(m.group(1)), float(m.group(3))
                            c_loop = "not batchable" in out
                            out, _ = run_measured([args.python, "-c", ORT_CHILD, model, npy, str(t), str(b),
                                                   str(args.repeat), args.wait,
                                                   "daz" if args.ort_daz else "-", str(args.min_time)])
                            m = re.search(r"p50=([0-9.]+) thr=([0-9.]+) loops=(\d+) cpu=([0-9.]+)", out)
                            o_p50, o_loops, o_cpu = float(m.group(1)), int(m.group(3)), float(m.group(4))
                            r = res[t]
                            r["c"].append(c_p50)
                            r["o"].append(o_p50)
                            r["cpu_c"].append(c_cpu)
                            r["cpu_o"].append(o_cpu)
                            r["pair"].append(c_p50 / o_p50)
                            r["mode"] = ("loop" if c_loop else "batched") + "/" + ("loop" if o_loops > 1 else "batched")
                    for t in args.threads:
                        r = res[t]
                        pr = "%.2f [%.2f, %.2f]" % (median(r["pair"]), min(r["pair"]), max(r["pair"]))
                        t1 = res[args.threads[0]]
                        vs1 = "-"
                        if t != args.threads[0]:  # also paired: each round's T-thread p50 over its 1-thread p50
                            per = [a / b for a, b in zip(r["c"], t1["c"])]
                            vs1 = "%.2f (per round %.2f [%.2f, %.2f])" % (median(r["c"]) / median(t1["c"]), median(per),
                                                                          min(per), max(per))
                        rows.append((name, t, b, min(r["c"]), median(r["c"]), min(r["o"]), median(r["o"]),
                                     median(r["c"]) / median(r["o"]), pr, vs1, median(r["cpu_c"]), median(r["cpu_o"]),
                                     r["mode"], os.getloadavg()[0]))
                        print("%-22s threads %d batch %d: cinfer p50 min %.2f med %.2f ms, ORT min %.2f med %.2f ms, "
                              "ratio %.2f, per round %s, vs 1 thread %s" % rows[-1][:10], flush=True)
    finally:
        if busy:
            busy.kill()
            busy.wait()
    print()
    print("repeat: at least %d runs and %.2f s per cell" % (args.repeat, args.min_time))
    print("wait: %s%s%s; load average at the end: %s" % (args.wait, "" if args.busy is None else ", busy loop on CPU %d" % args.busy,
                                                    "".join(", cinfer with " + kv for kv in args.cinfer_env),
                                                    " ".join("%.2f" % x for x in os.getloadavg())))
    print("| model | threads | batch | cinfer p50 ms min / median | ORT p50 ms min / median | ratio of medians | per-round ratio median [range] | cinfer T / 1 thread (per round median [range]) | cinfer CPU ms/batch | ORT CPU ms/batch | batch mode (cinfer/ORT) | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %d | %.2f / %.2f | %.2f / %.2f | %.2f | %s | %s | %.2f | %.2f | %s | %.1f |" % r)
    ratios = [r[7] for r in rows]
    if ratios:
        g = 1.0
        for x in ratios:
            g *= x
        print()
        print("geomean ratio of medians: %.2f over %d cells; cells above 1.0: %d" % (g ** (1.0 / len(ratios)), len(ratios),
                                                                                sum(1 for x in ratios if x > 1.0)))
        slower = [r for r in rows if r[9] != "-" and float(r[9].split()[0]) > 1.0]
        print("cells where cinfer at T threads is slower than at %d: %d%s" % (
            args.threads[0], len(slower), "".join("; %s T%d b%d %s" % (r[0], r[1], r[2], r[9]) for r in slower)))
        paired = [r for r in rows if r[9] != "-" and float(r[9].split()[3]) > 1.0]
        print("... by the median of the per-round ratios: %d%s" % (
            len(paired), "".join("; %s T%d b%d %s" % (r[0], r[1], r[2], r[9]) for r in paired)))
        if args.rounds > 1:  # a loss in every round: larger than the host's noise (sign test, p = 2^-rounds)
            lo = lambda s: float(s.split("[")[1].split(",")[0])
            always_o = [r for r in rows if lo(r[8]) > 1.0]
            always_t = [r for r in rows if r[9] != "-" and lo(r[9]) > 1.0]
            print("cells where cinfer is slower than ORT in every one of the %d rounds: %d%s" % (
                args.rounds, len(always_o), "".join("; %s T%d b%d %s" % (r[0], r[1], r[2], r[8]) for r in always_o)))
            print("cells where cinfer at T threads is slower than at %d in every round: %d%s" % (
                args.threads[0], len(always_t), "".join("; %s T%d b%d %s" % (r[0], r[1], r[2], r[9]) for r in always_t)))


if __name__ == "__main__":
    main()
