"""perf_analyzer (PyPI perf-analyzer) against the identity model over HTTP at concurrency
1..16: it must complete without errors and print the server-side breakdown, which it reads
from our statistics endpoint."""
import os
import shutil
import subprocess
import sys

import pytest

from cinfer_server import Server


def perf_analyzer_bin():
    cand = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    return cand if os.path.exists(cand) else shutil.which("perf_analyzer")


def perf_analyzer_env():
    """perf_analyzer links libcudart.so.12 (from nvidia-cuda-runtime-cu12; no GPU is used)."""
    import nvidia.cuda_runtime
    lib = os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = lib + ":" + env.get("LD_LIBRARY_PATH", "")
    return env


def test_perf_analyzer_concurrency_sweep():
    pa = perf_analyzer_bin()
    assert pa, "perf_analyzer is not installed in the venv (scripts/setup.sh installs it)"
    with Server() as s:
        s.wait_ready()
        cmd = [pa, "-m", "identity", "-u", s.hostport, "-i", "http", "--shape", "INPUT0:16",
               "--concurrency-range", "1:16:5", "--measurement-mode", "count_windows",
               "--measurement-request-count", "200",
               # functional check on a shared machine: any three windows count as stable
               "--stability-percentage", "10000", "--max-trials", "4", "-v"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=perf_analyzer_env())
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert "Server:" in out and "Inference count:" in out, out
        assert "queue" in out and "compute infer" in out, out
        for conc in (1, 6, 11, 16):
            assert f"Concurrency: {conc}," in out, out
        assert "error" not in out.lower().replace("error rate", ""), out
