"""Shared helpers for the gateway integration tests (no tests here): a running
`cinfer gateway`, fake upstreams that misbehave on purpose, a keep-alive HTTP client and
bounded waits on conditions."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import time

from cinfer_server import BIN, EXAMPLES, CinferProcess, Server  # noqa: F401  (re-exported)


def parse_head(head):
    """An HTTP/1.1 request head (bytes, without the blank line): (method, path, Content-Length)."""
    lines = head.decode("latin1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    n = 0
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            n = int(v.strip())
    return method, path, n


def wait_for(cond, timeout=20.0, what="condition"):
    """Polls cond() until it returns a truthy value, bounded by timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Gateway(CinferProcess):
    """A running `cinfer gateway` on an ephemeral loopback port, from a config dict."""

    what = "cinfer gateway"

    def __init__(self, config, args=()):
        super().__init__(args, startup_timeout=30)
        self.config = config

    def start(self):
        fd, self.cfg_path = tempfile.mkstemp(prefix="cinfer-gw-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(self.config, f)
        return self._launch([BIN, "gateway", "--config", self.cfg_path, "--host", "127.0.0.1",
                             "--port", "0", "--log-verbose", "1"] + self.args)

    def wait_ready(self, timeout=20):
        wait_for(lambda: get(self.port, "/readyz")[0] == 200, timeout, "gateway /readyz")

    def status(self):
        code, _, body = get(self.port, "/status.json")
        assert code == 200
        return json.loads(body)

    def replica(self, hostport):
        for r in self.status()["replicas"]:
            if r["upstream"] == hostport:
                return r
        return None

    def metrics(self):
        return get(self.port, "/metrics")[2].decode()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        rc = super().stop(sig, timeout)
        try:
            os.unlink(self.cfg_path)
        except (OSError, AttributeError):
            pass
        return rc


def request(port, method, path, body=None, headers=None, timeout=30, conn=None, host="127.0.0.1"):
    """One HTTP request; returns (status, headers dict (lower-case), body bytes)."""
    own = conn is None
    c = conn or http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        b = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, b
    finally:
        if own:
            c.close()


def get(port, path, **kw):
    try:
        return request(port, "GET", path, **kw)
    except OSError as e:
        return 0, {}, str(e).encode()


INFER_SIM = {"inputs": [{"name": "images", "datatype": "UINT8", "shape": [1, 16],
                         "data": list(range(16))}]}
INFER_ID = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
                        "data": [1.0, 2.0, 3.0, 4.0]}]}


def fast_sim_repo(base_us=200, per_item_us=10, name="sim_detector"):
    """A repository with a copy of sim_detector whose cost model is fast."""
    d = tempfile.mkdtemp(prefix="cinfer-gw-repo-")
    src = os.path.join(EXAMPLES, "sim_detector")
    dst = os.path.join(d, name)
    shutil.copytree(src, dst)
    p = os.path.join(dst, "config.pbtxt")
    text = open(p).read()
    text = text.replace('name: "sim_detector"', f'name: "{name}"')
    text = re.sub(r'"base_us" value: \{ string_value: "\d+" \}',
                  f'"base_us" value: {{ string_value: "{base_us}" }}', text)
    text = re.sub(r'"per_item_us" value: \{ string_value: "\d+" \}',
                  f'"per_item_us" value: {{ string_value: "{per_item_us}" }}', text)
    text = text.replace("max_queue_delay_microseconds: 2000", "max_queue_delay_microseconds: 100")
    open(p, "w").write(text)
    return d


def replica(repo, control=False):
    """A replica; control=True starts it in explicit model-control mode with every model
    loaded, so load/unload calls through the gateway can succeed (mode none refuses them)."""
    extra = ["--model-control-mode", "explicit", "--load-model", "*"] if control else []
    return Server(repo, ["--threads", "2", "--exit-timeout-secs", "10"] + extra)


class LoadGen:
    """Steady closed-loop load: `workers` threads, each with its own keep-alive connection,
    send the same request until stopped; every non-200 answer or exception is recorded."""

    def __init__(self, port, path, body, workers=4, host="127.0.0.1"):
        self.port, self.path, self.body, self.workers = port, path, body, workers
        self.host = host
        self.ok = 0
        self.failures = []
        self.by_upstream = {}
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.threads = []

    def _run(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        data = json.dumps(self.body).encode()
        while not self.stop_ev.is_set():
            try:
                conn.request("POST", self.path, body=data)
                r = conn.getresponse()
                b = r.read()
                with self.lock:
                    if r.status == 200:
                        self.ok += 1
                        up = r.getheader("X-Cinfer-Upstream")
                        self.by_upstream[up] = self.by_upstream.get(up, 0) + 1
                    else:
                        self.failures.append((r.status, b[:200]))
            except Exception as e:  # a failed client request
                with self.lock:
                    self.failures.append(("exception", repr(e)))
                conn.close()
                conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        conn.close()

    def start(self):
        for _ in range(self.workers):
            t = threading.Thread(target=self._run, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def count(self):
        with self.lock:
            return self.ok

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(60)


def steady_load_then(port, fault, workers=6, replicas=3, host="127.0.0.1",
                     path="/v2/models/sim_detector/infer", body=INFER_SIM):
    """Runs load, waits until `replicas` replicas served some, applies fault() (its result is
    returned first), keeps the load going for 600 more successes; returns (result, LoadGen)."""
    load = LoadGen(port, path, body, workers, host=host).start()
    try:
        wait_for(lambda: len(load.by_upstream) >= replicas and load.count() >= 200, 30,
                 "load on all replicas")
        res = fault()
        base = load.count()
        wait_for(lambda: load.count() >= base + 600, 40, "load after the fault")
    finally:
        load.stop()
    return res, load


def send_many(port, n, path, body, workers=4, headers=None, host="127.0.0.1"):
    """n requests over `workers` keep-alive connections; returns a list of
    (status, headers) in completion order."""
    out, lock = [], threading.Lock()
    per = [n // workers + (1 if i < n % workers else 0) for i in range(workers)]
    data = json.dumps(body).encode()

    def run(k):
        c = http.client.HTTPConnection(host, port, timeout=30)
        res = []
        for _ in range(k):
            c.request("POST", path, body=data, headers=headers or {})
            r = c.getresponse()
            r.read()
            res.append((r.status, {a.lower(): b for a, b in r.getheaders()}))
        c.close()
        with lock:
            out.extend(res)

    ts = [threading.Thread(target=run, args=(k,)) for k in per]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out


def saturate(port, path, body, headers, seconds, workers=4, host="127.0.0.1"):
    """Closed-loop load for `seconds` (every answer must be 200 or 429). Returns a dict:
    admitted, limited, retry_after (set of values), and window: the time in which the
    gateway admitted, from the first request sent to the last 200 received."""
    stop = threading.Event()
    admitted, limited, lock = [0], [0], threading.Lock()
    retry_after, bad = set(), []
    first_send, last_ok = [], [0.0]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    def run():
        c = http.client.HTTPConnection(host, port, timeout=30)
        while not stop.is_set():
            t_send = time.monotonic()
            c.request("POST", path, body=data, headers=headers)
            r = c.getresponse()
            r.read()
            t_done = time.monotonic()
            with lock:
                if not first_send:
                    first_send.append(t_send)
                if r.status == 200:
                    admitted[0] += 1
                    last_ok[0] = max(last_ok[0], t_done)
                elif r.status == 429:
                    limited[0] += 1
                    retry_after.add(r.getheader("Retry-After"))
                else:
                    bad.append(r.status)
        c.close()

    ts = [threading.Thread(target=run) for _ in range(workers)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    wait_for(lambda: time.monotonic() - t0 >= seconds, seconds + 10, f"{seconds} s of load")
    stop.set()
    for t in ts:
        t.join(30)
    assert bad == [], bad[:10]
    return {"admitted": admitted[0], "limited": limited[0], "retry_after": retry_after,
            "window": last_ok[0] - first_send[0]}


class FakeUpstream:
    """A raw-socket HTTP server that passes health and model discovery (model `fake`) but
    answers inference (any other path) according to `mode`:
      ok       200 with a JSON body
      hang     never answers
      close    sends a head with Content-Length 100, 10 body bytes, then closes
      garbage  sends bytes that are not HTTP
      sse      chunked text/event-stream: event 1, waits for .release, then event 2
      503      503 with a JSON body
    """

    def __init__(self, mode, openai_models=None):
        self.mode = mode
        self.openai_models = openai_models
        self.release = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.hostport = f"127.0.0.1:{self.port}"
        self.inference_hits = 0
        self.closing = False
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closing:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _read_request(self, c, buf):
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return None, b""
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        method, path, n = parse_head(head)
        while len(rest) < n:
            d = c.recv(65536)
            if not d:
                return None, b""
            rest += d
        return (method, path, rest[:n]), rest[n:]

    @staticmethod
    def _send(c, status, body, ctype="application/json"):
        c.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                  f"\r\n\r\n".encode() + body)

    def _serve(self, c):
        buf = b""
        try:
            while True:
                req, buf = self._read_request(c, buf)
                if req is None:
                    return
                method, path, _ = req
                if path.startswith("/v2/health"):
                    self._send(c, 200, b"")
                elif path == "/v2/repository/index":
                    self._send(c, 200, b'[{"name":"fake","version":"1","state":"READY"}]')
                elif path == "/v1/models" and self.openai_models:
                    data = [{"id": m, "object": "model"} for m in self.openai_models]
                    self._send(c, 200, json.dumps({"object": "list", "data": data}).encode())
                elif path == "/v1/models":
                    self._send(c, 404, b'{"error":"no"}')
                else:
                    self.inference_hits += 1
                    if self.mode == "ok":
                        self._send(c, 200, b'{"ok":true}')
                    elif self.mode == "503":
                        self._send(c, 503, b'{"error":"busy"}')
                    elif self.mode == "hang":
                        self.release.wait(60)
                        return
                    elif self.mode == "close":
                        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
                        return
                    elif self.mode == "garbage":
                        c.sendall(b"\x00\x01garbage that is not HTTP\r\n\r\n")
                        return
                    elif self.mode == "sse":
                        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n")
                        ev1 = b"data: one\n\n"
                        c.sendall(b"%x\r\n%s\r\n" % (len(ev1), ev1))
                        self.release.wait(30)
                        ev2 = b"data: two\n\n"
                        c.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev2), ev2))
        except OSError:
            return
        finally:
            c.close()

    def close(self):
        self.closing = True
        self.release.set()
        try:
            # wakes the accept() of _accept: close() alone leaves the socket listening
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


def copy_repo_models(models):
    from cinfer_server import copy_repo
    return copy_repo(models)
