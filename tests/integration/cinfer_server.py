"""Starts the real `cinfer serve` binary on an ephemeral loopback port for a test."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request

BIN = os.environ.get("CINFER_BIN", "build/src/cli/cinfer")
SRC = os.environ.get("CINFER_SOURCE_DIR", ".")
EXAMPLES = os.path.join(SRC, "examples", "model_repository")


class CinferProcess:
    """A `cinfer` subcommand started on an ephemeral loopback port: reads the port from its
    log line `http_port=N`, keeps the log, and on exit fails the test on a sanitizer report,
    a crash or a non-zero exit. Subclasses build the command line in start()."""

    what = "cinfer"

    def __init__(self, args=(), startup_timeout=60):
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.proc = None
        self.port = None
        self.grpc_port = None  # `cinfer serve`: its grpc_port=N (0 when gRPC is off)
        self.log = []

    def _launch(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        port_seen = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.append(line)
                m = re.search(r"http_port=(\d+)", line)
                if m and not port_seen.is_set():
                    g = re.search(r"grpc_port=(\d+)", line)
                    self.grpc_port = int(g.group(1)) if g else None
                    self.port = int(m.group(1))
                    port_seen.set()
            port_seen.set()

        self.reader = threading.Thread(target=pump, daemon=True)
        self.reader.start()
        if not port_seen.wait(self.startup_timeout) or self.port is None:
            self.stop()
            raise RuntimeError(f"{self.what} did not start:\n" + "".join(self.log))
        self.url = f"http://127.0.0.1:{self.port}"
        self.hostport = f"127.0.0.1:{self.port}"
        return self

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "reader", None):
            self.reader.join(5)
        return self.proc.returncode if self.proc else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        rc = self.stop()
        # A sanitizer report or a crash must fail the test that caused it.
        text = "".join(self.log)
        assert "ERROR: AddressSanitizer" not in text, text
        assert "runtime error:" not in text, text
        assert "ERROR: LeakSanitizer" not in text, text
        assert rc == 0, f"{self.what} exited with {rc}:\n{text}"


class Server(CinferProcess):
    """A running `cinfer serve`. Use as a context manager; .url is http://127.0.0.1:PORT."""

    what = "cinfer serve"

    def __init__(self, repo=EXAMPLES, args=(), startup_timeout=60):
        super().__init__(args, startup_timeout)
        self.repo = repo

    def start(self):
        # An ephemeral gRPC port too, so servers of tests that run at once never share 8001.
        grpc = [] if "--grpc-port" in self.args else ["--grpc-port", "0"]
        return self._launch([BIN, "serve", "--model-repository", self.repo, "--host", "127.0.0.1",
                             "--http-port", "0"] + grpc + self.args)

    def wait_ready(self, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/v2/health/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
            time.sleep(0.05)
        raise RuntimeError("server never became ready:\n" + "".join(self.log))


def _copy_keep_links(src, dst):
    """copytree helper: a symlink (model files) becomes an absolute link to its target."""
    if os.path.islink(src):
        os.symlink(os.path.realpath(src), dst)
    else:
        shutil.copy2(src, dst)


def copy_repo(models, dest=None):
    """A temporary repository with copies of the named example models (model files linked)."""
    dest = dest or tempfile.mkdtemp(prefix="cinfer-repo-")
    for m in models:
        shutil.copytree(os.path.join(EXAMPLES, m), os.path.join(dest, m), symlinks=False,
                        copy_function=_copy_keep_links)
    return dest


def write_model(repo, name, config, model_py=None):
    """Model `name` in repo: its config.pbtxt and, when given, version 1's model.py."""
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(config)
    if model_py:
        with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
            f.write(model_py)


def metric(server, name, labels):
    """The value of the /metrics series name{labels}, or None when it is absent."""
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{" + labels + "}"):
            return float(line.split()[-1])
    return None
