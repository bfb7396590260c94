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


def test_perf_analyzer_concurrency_sweep():
    pa = perf_analyzer_bin()
    assert pa, "perf_analyzer is not installed in the venv (scripts/setup.sh installs it)"
    with Server() as s:
        s.wait_ready()
        cmd = [pa, "-m", "identity", "-u", s.hostport, "-i", "http", "--shape", "INPUT0:16",
               "--concurrency-range", "1:16:5", "--measurement-interval", "800",
               "--stability-percentage", "50", "--max-trials", "6", "-v"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert "Server:" in out and "Inference count:" in out, out
        assert "Queue" in out and "Compute infer" in out, out
        for conc in (1, 6, 11, 16):
            assert f"Concurrency: {conc}," in out, out
        assert "error" not in out.lower().replace("error rate", ""), out
