"""When the server dies without a word (SIGKILL), its Python stub processes end too: an idle
one (its main thread reads the socket and sees EOF) and one whose execute() is stuck in
user code (the stub's watchdog thread sees the socket hang up). Nothing is left running."""
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

import numpy as np
import tritonclient.http as httpclient

from cinfer_server import Server

os.environ["CINFER_PYTHON"] = sys.executable

CONFIG = """name: "{name}"
backend: "python"
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "Y" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""

PY = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            if int(x[0]) == 1:
                open({flag!r}, "w").close()
                time.sleep(1000)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", x)]))
        return out
"""


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    out.append(int(p))
            except OSError:
                pass
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(cond, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_stubs_end_when_the_server_is_killed():
    repo = tempfile.mkdtemp(prefix="cinfer-pyorphan-")
    flag = os.path.join(repo, "in_execute")
    for name in ("idle", "stuck"):
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(CONFIG.format(name=name))
        with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
            f.write(PY.format(flag=flag))
    s = Server(repo)
    stubs = []
    try:
        s.start()
        s.wait_ready()
        stubs = children(s.proc.pid)
        assert len(stubs) == 2, stubs

        def hang():
            try:
                with httpclient.InferenceServerClient(s.hostport, network_timeout=300) as c:
                    i = httpclient.InferInput("X", [1], "INT32")
                    i.set_data_from_numpy(np.array([1], dtype=np.int32))
                    c.infer("stuck", [i])
            except Exception:
                pass  # the server is killed under it

        t = threading.Thread(target=hang, daemon=True)
        t.start()
        assert wait_for(lambda: os.path.exists(flag)), "execute() never started"
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait(30)
        assert wait_for(lambda: not any(alive(p) for p in stubs)), \
            [p for p in stubs if alive(p)]
    finally:
        for p in stubs:  # only when the check above failed: do not leave them running
            if alive(p):
                os.kill(p, signal.SIGKILL)
        if s.proc and s.proc.poll() is None:
            s.proc.kill()
        shutil.rmtree(repo)
