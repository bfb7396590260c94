"""Cheap fake replicas for gateway tests that need many of them (no tests here): one asyncio
loop in a thread listens on N loopback ports and answers, on each, what the gateway asks a
`cinfer serve` replica over HTTP:

- GET /v2/health/ready: 200;
- POST /v2/repository/index: the models given (READY, version 1);
- GET /v1/models: 404 (no OpenAI API);
- GET /metrics: the Prometheus text given (default empty);
- POST /v2/models/NAME/infer for a listed NAME: 200, a KServe answer naming NAME and this port.

Each answered inference is counted per port (self.hits). Nothing else is implemented: any
other request gets 404."""
import asyncio
import json
import threading

from test_gateway_common import parse_head


class FakeUpstreams:
    def __init__(self, n, models=("identity",), metrics=""):
        self.n, self.models, self.metrics = n, list(models), metrics
        self.ports = []
        self.hits = {}
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.servers = []
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        if not self.ready.wait(60):
            raise RuntimeError("fake upstreams did not start")
        if len(self.ports) != self.n:
            raise RuntimeError(f"fake upstreams: {len(self.ports)} of {self.n} ports listen")
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        try:
            for _ in range(self.n):
                srv = self.loop.run_until_complete(asyncio.start_server(self._conn, "127.0.0.1", 0))
                self.servers.append(srv)
                self.ports.append(srv.sockets[0].getsockname()[1])
        finally:
            self.ready.set()
        self.loop.run_forever()
        for s in self.servers:
            s.close()

    def _answer(self, port, method, path, body):
        if method == "GET" and path == "/v2/health/ready":
            return 200, b""
        if method == "POST" and path == "/v2/repository/index":
            return 200, json.dumps([{"name": m, "version": "1", "state": "READY"} for m in self.models]).encode()
        if method == "GET" and path == "/metrics":
            return 200, self.metrics.encode()
        pre = "/v2/models/"
        if method == "POST" and path.startswith(pre) and path.endswith("/infer"):
            name = path[len(pre):-len("/infer")]
            if name in self.models:
                with self.lock:
                    self.hits[port] = self.hits.get(port, 0) + 1
                return 200, json.dumps({"model_name": name, "model_version": "1",
                                        "outputs": [{"name": "PORT", "datatype": "INT32", "shape": [1],
                                                     "data": [port]}]}).encode()
        return 404, json.dumps({"error": f"fake upstream: no {method} {path}"}).encode()

    async def _conn(self, reader, writer):
        port = writer.get_extra_info("sockname")[1]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                method, path, length = parse_head(head[:-4])
                body = await reader.readexactly(length) if length else b""
                code, out = self._answer(port, method, path, body)
                reason = {200: "OK", 404: "Not Found"}[code]
                writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(out)}\r\n\r\n".encode() + out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()
