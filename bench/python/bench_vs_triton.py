#!/usr/bin/env python3
"""bench_vs_triton.py: cinfer's Python backend side by side with Triton 2.51's (issue 22).

Starts `cinfer serve` and the real Triton 2.51 server (the PyPI wheel nvidia-pytriton==0.7.0
carries `pytriton/tritonserver/bin/tritonserver`, its Python backend and the 3.11 stub; it
runs without a GPU) on the same repository of Python models, and measures both with the
same client, perf_analyzer (HTTP, closed loop), at concurrency 1, 8 and 32:

  identity_py   Python identity, 16 FP32, max_batch_size 8 + dynamic_batching (so this is
                also the first direct comparison of the two HTTP front ends and dynamic
                batchers on one model)
  add_sub       Triton's add_sub example model (written here from its documented API)
  bls_onnx      cinfer only: a Python BLS model calling an ONNX model (Y = X + X)

Both servers run the models on the same interpreter: Debian's /usr/bin/python3 (3.11, the
libpython Triton's stub links) with numpy from python3-numpy. The wheel is downloaded with
pip into a cache folder (build/triton-2.51 by default) on first use, not installed.

The machine is shared, so each (model, concurrency) point is measured --rounds times,
the two servers alternating (which one goes first alternates too), and the table reports
the medians, with the range of the req/s figures and the load average before and after.

usage: bench/python/bench_vs_triton.py [--quick] [--rounds 3] [--out docs/benchmarks-python.md]
"""
import statistics
import argparse
import csv
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "sched"))
from bench_sched import svg_plot  # noqa: E402

PY = "/usr/bin/python3"
CONC = [1, 8, 32]

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
            for r in requests]
"""
IDENTITY_CFG = """name: "identity_py"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
ADD_SUB_PY = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.dt = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(cfg, "OUTPUT0")["data_type"])

    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dt)),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dt))]))
        return out
"""
ADD_SUB_CFG = """name: "add_sub"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
BLS_PY = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            resp = pb_utils.InferenceRequest(model_name="double_onnx",
                inputs=[pb_utils.Tensor("X", x.reshape(1, 4))],
                requested_output_names=["Y"]).exec()
            if resp.has_error():
                raise pb_utils.TritonModelException(resp.error().message())
            y = pb_utils.get_output_tensor_by_name(resp, "Y").as_numpy().reshape(4)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)]))
        return out
"""
BLS_CFG = """name: "bls_onnx"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
MODELS = [("identity_py", "INPUT0:16"), ("add_sub", "INPUT0:4 INPUT1:4"), ("bls_onnx", "X:4")]


def write(repo, name, cfg, py):
    os.makedirs(os.path.join(repo, name, "1"))
    open(os.path.join(repo, name, "config.pbtxt"), "w").write(cfg)
    open(os.path.join(repo, name, "1", "model.py"), "w").write(py)


def double_onnx(repo):
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Add", ["X", "X"], ["Y"])], "double",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    os.makedirs(os.path.join(repo, "double_onnx", "1"))
    onnx.save(m, os.path.join(repo, "double_onnx", "1", "model.onnx"))
    open(os.path.join(repo, "double_onnx", "config.pbtxt"), "w").write(
        'name: "double_onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')


def triton_dir(cache):
    """The unpacked wheel (downloaded with pip on first use); the 3.11 stub copied into
    backends/python as Triton expects."""
    root = os.path.join(cache, "wheel")
    server = os.path.join(root, "pytriton", "tritonserver")
    if not os.path.exists(os.path.join(server, "bin", "tritonserver")):
        os.makedirs(cache, exist_ok=True)
        subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps",
                               "nvidia-pytriton==0.7.0", "-d", cache])
        whl = glob.glob(os.path.join(cache, "nvidia_pytriton-0.7.0-*.whl"))[0]
        with zipfile.ZipFile(whl) as z:
            z.extractall(root)
    stub = os.path.join(server, "backends", "python", "triton_python_backend_stub")
    if not os.path.exists(stub):
        shutil.copy(os.path.join(server, "python_backend_stubs", "3.11",
                                 "triton_python_backend_stub"), stub)
    for f in (os.path.join(server, "bin", "tritonserver"), stub):
        os.chmod(f, 0o755)
    return root


def wait_ready(port, proc, log, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited:\n" + open(log).read()[-4000:])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError("server not ready:\n" + open(log).read()[-4000:])


def perf(port, model, shapes, conc, window_ms, work):
    """One perf_analyzer measurement. On a loaded machine it may not stabilise within 50%:
    then it is retried allowing 100%, then 1000% (such a point is marked unstable)."""
    env = dict(os.environ)
    cuda = glob.glob(os.path.join(os.path.dirname(os.path.dirname(sys.executable)), "lib",
                                  "python3*", "site-packages", "nvidia", "cuda_runtime", "lib"))
    if cuda:
        env["LD_LIBRARY_PATH"] = cuda[0] + ":" + env.get("LD_LIBRARY_PATH", "")
    pa = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    out = os.path.join(work, f"pa-{port}-{model}-{conc}.csv")
    for stability in (50, 100, 1000):
        if os.path.exists(out):
            os.unlink(out)
        cmd = [pa, "-m", model, "-u", f"127.0.0.1:{port}", "-i", "http",
               "--concurrency-range", f"{conc}:{conc}", "--measurement-interval", str(window_ms),
               "--max-trials", "10", "--stability-percentage", str(stability), "-f", out]
        for sh in shapes.split():
            cmd += ["--shape", sh]
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if os.path.exists(out):
            break
        if "stable" not in p.stdout:
            raise RuntimeError(f"perf_analyzer failed ({p.returncode}):\n{p.stdout[-3000:]}")
    else:
        raise RuntimeError(f"perf_analyzer found no stable measurement:\n{p.stdout[-3000:]}")
    with open(out) as f:
        row = next(csv.DictReader(f))
    return {"concurrency": conc, "rps": float(row["Inferences/Second"]),
            "p50": float(row["p50 latency"]) / 1000, "p99": float(row["p99 latency"]) / 1000,
            "unstable": stability > 50}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 s windows")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--cache", default=None, help="where the Triton wheel is kept")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks-python.md"))
    ap.add_argument("--plots", default=os.path.join(ROOT, "docs", "plots"))
    ap.add_argument("--rounds", type=int, default=3, help="measurements per point (medians)")
    ap.add_argument("--models", default=",".join(m for m, _ in MODELS),
                    help="comma-separated subset of " + ",".join(m for m, _ in MODELS))
    a = ap.parse_args()
    if subprocess.run([PY, "-c", "import numpy"]).returncode != 0:
        sys.exit(f"{PY} has no numpy: apt-get install python3-numpy (both servers' models run on it)")
    tdir = triton_dir(a.cache or os.path.join(a.build, "triton-2.51"))
    window = 1000 if a.quick else 3000
    work = tempfile.mkdtemp(prefix="bench-py-")
    common, cin = os.path.join(work, "triton_repo"), os.path.join(work, "cinfer_repo")
    for repo in (common, cin):
        write(repo, "identity_py", IDENTITY_CFG, IDENTITY_PY)
        write(repo, "add_sub", ADD_SUB_CFG, ADD_SUB_PY)
    write(cin, "bls_onnx", BLS_CFG, BLS_PY)
    double_onnx(cin)
    servers = {}
    procs = []
    try:
        port = 21000 + os.getpid() % 8000
        log = os.path.join(work, "cinfer.log")
        p = subprocess.Popen([os.path.join(a.build, "src", "cli", "cinfer"), "serve",
                              "--model-repository", cin, "--host", "127.0.0.1",
                              "--http-port", str(port), "--grpc-port", "off"],
                             env=dict(os.environ, CINFER_PYTHON=PY),
                             stdout=open(log, "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        wait_ready(port, p, log)
        servers["cinfer"] = port
        tport = port + 10
        log = os.path.join(work, "triton.log")
        server = os.path.join(tdir, "pytriton", "tritonserver")
        p = subprocess.Popen([os.path.join(server, "bin", "tritonserver"),
                              "--model-repository", common,
                              "--backend-directory", os.path.join(server, "backends"),
                              "--http-port", str(tport), "--grpc-port", str(tport + 1),
                              "--metrics-port", str(tport + 2), "--allow-gpu-metrics", "false"],
                             env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(tdir, "nvidia_pytriton.libs")),
                             stdout=open(log, "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        wait_ready(tport, p, log)
        servers["triton 2.51"] = tport
        load0 = open("/proc/loadavg").read().split()[:3]
        raw = {}
        failures = []
        names = list(servers)
        for rnd in range(a.rounds):
            for model, shapes in MODELS:
                if model not in a.models.split(","):
                    continue
                for c in CONC:
                    order = names if rnd % 2 == 0 else names[::-1]
                    for name in order:
                        if model == "bls_onnx" and name != "cinfer":
                            continue
                        try:
                            r = perf(servers[name], model, shapes, c, window, work)
                        except RuntimeError as e:  # recorded; the other points go on
                            last = [ln for ln in str(e).splitlines() if ln.strip()][-1]
                            failures.append(f"round {rnd + 1}, {model}, {name}, c={c}: {last}")
                            print("FAILED", failures[-1], flush=True)
                            continue
                        print(f"round {rnd + 1} {model:12} {name:12} c={c:3} {r['rps']:9.1f} req/s"
                              f"  p50 {r['p50']:7.3f} ms  p99 {r['p99']:7.3f} ms"
                              f"{'  (unstable)' if r['unstable'] else ''}", flush=True)
                        raw.setdefault((model, name), {}).setdefault(c, []).append(r)
        results = {}
        for key, by_c in raw.items():
            results[key] = [{"concurrency": c,
                             "rps": statistics.median(x["rps"] for x in rs),
                             "rps_min": min(x["rps"] for x in rs),
                             "rps_max": max(x["rps"] for x in rs),
                             "p50": statistics.median(x["p50"] for x in rs),
                             "p99": statistics.median(x["p99"] for x in rs),
                             "unstable": sum(x["unstable"] for x in rs)}
                            for c, rs in sorted(by_c.items())]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    os.makedirs(a.plots, exist_ok=True)
    svg_plot({f"{m} {n}": rows for (m, n), rows in results.items() if m != "bls_onnx"},
             os.path.join(a.plots, "python-vs-triton-rps.svg"),
             "Python backend: cinfer vs Triton 2.51 (perf_analyzer HTTP)", "requests/s", "rps")
    load = open("/proc/loadavg").read().split()[:3]
    with open(a.out, "w") as f:
        f.write("# Python backend: cinfer vs Triton 2.51 (issue 22)\n\n")
        sub = "" if a.models == ",".join(m for m, _ in MODELS) else f" --models {a.models}"
        f.write(f"Command: `bench/python/bench_vs_triton.py{' --quick' if a.quick else ''} "
                f"--rounds {a.rounds}{sub}` ({time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} cores "
                f"shared with other work, load average {' '.join(load0)} before and "
                f"{' '.join(load)} after; perf_analyzer HTTP, closed loop, {window} ms windows, up "
                f"to 10 trials, stable within 50%; medians of {a.rounds} rounds, the servers "
                f"alternating). Both servers run the models on {PY} with Debian's numpy; one "
                f"instance each.\n\n")
        f.write("| model | server | concurrency | req/s (median) | req/s range | p50 ms | p99 ms | cinfer/Triton req/s | cinfer/Triton p50 |\n")
        f.write("|---|---|---|---|---|---|---|---|---|\n")
        for (model, name), rows in results.items():
            for r in rows:
                ratio = ""
                if name == "cinfer" and (model, "triton 2.51") in results:
                    t = next(x for x in results[(model, "triton 2.51")] if x["concurrency"] == r["concurrency"])
                    ratio = f"| {r['rps'] / t['rps']:.2f}x | {r['p50'] / t['p50']:.2f}x"
                else:
                    ratio = "| |"
                f.write(f"| {model} | {name} | {r['concurrency']} | {r['rps']:.0f} | "
                        f"{r['rps_min']:.0f}-{r['rps_max']:.0f}{'*' * bool(r['unstable'])} | {r['p50']:.3f} "
                        f"| {r['p99']:.3f} {ratio} |\n")
        if failures:
            f.write("\nMeasurements that failed (left out of the medians):\n\n")
            for x in failures:
                f.write(f"- {x}\n")
        f.write("\n`*`: some of the rounds did not stabilise within 50% in 10 windows and were "
                "measured allowing 100% (or 1000%).\n")
        f.write("\n![throughput](plots/python-vs-triton-rps.svg)\n")
    print("wrote", a.out)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
