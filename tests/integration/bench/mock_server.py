#!/usr/bin/env python3
"""mock_server.py: a small HTTP/1.1 server standing in for `cinfer serve` in the bench
tests until the real server exists. Stdlib only. It speaks just enough of:
  KServe v2: GET /v2/models/identity (metadata: INPUT0 FP32 [1,16], TEXT BYTES [-1] with
             --shape), POST /v2/models/identity/infer (JSON or binary; validates every
             request against the metadata and counts it), GET /v2/models/identity/stats.
  OpenAI:    POST /v1/chat/completions and /v1/completions, streamed as SSE over chunked
             transfer encoding (role chunk, max_tokens content chunks, usage chunk,
             [DONE]) or as one JSON body.
  Image model: GET /v2/models/image (data FP32 [1,3,6,8]), POST .../infer records values.
  GET /garbage answers bytes that are not HTTP; GET /slow answers after 1 s.
  Also GET /v2, /v2/health/*, /v2/models/identity/config, so perf_analyzer can run on it.
  GET /count returns the counters as JSON. --fail-after N: every request after the first
  N answers HTTP 500. Prints the port on stdout once listening."""
import json, struct, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

META = {"name": "identity", "versions": ["1"], "platform": "mock",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16]},
                   {"name": "TEXT", "datatype": "BYTES", "shape": [-1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16]}]}
IMAGE_META = {"name": "image", "versions": ["1"], "platform": "mock",
              "inputs": [{"name": "data", "datatype": "FP32", "shape": [1, 3, 6, 8]}],
              "outputs": [{"name": "out", "datatype": "FP32", "shape": [1]}]}
lock = threading.Lock()
counts = {"infer": 0, "bad": 0, "chat": 0, "completions": 0, "total": 0, "binary": 0,
          "first_values": None, "errors": []}
fail_after = None
close_after_stream = False


def check_infer(body, headers):
    hlen = headers.get("Inference-Header-Content-Length")
    if hlen is not None:
        hdr = json.loads(body[:int(hlen)])
        blob = body[int(hlen):]
    else:
        hdr, blob = json.loads(body), None
    ins = {i["name"]: i for i in hdr["inputs"]}
    assert set(ins) == {"INPUT0", "TEXT"}, ins.keys()
    x = ins["INPUT0"]
    assert x["datatype"] == "FP32" and x["shape"] == [1, 16], x
    t = ins["TEXT"]
    assert t["datatype"] == "BYTES" and len(t["shape"]) == 1, t
    if blob is not None:
        n0 = x["parameters"]["binary_data_size"]
        assert n0 == 64, n0
        vals = list(struct.unpack("<16f", blob[:64]))
        rest = blob[64:]
        assert len(rest) == t["parameters"]["binary_data_size"]
        strings, off = [], 0
        while off < len(rest):
            (n,) = struct.unpack_from("<I", rest, off)
            strings.append(rest[off + 4:off + 4 + n].decode())
            off += 4 + n
        assert len(strings) == t["shape"][0], (len(strings), t["shape"])
    else:
        vals = x["data"]
        assert len(vals) == 16 and all(isinstance(v, (int, float)) for v in vals)
        assert len(t["data"]) == t["shape"][0] and all(isinstance(s, str) for s in t["data"])
    return vals, blob is not None


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16               # one write per response (no Nagle/delayed-ACK stalls)
    disable_nagle_algorithm = True

    def log_message(self, *a):
        pass

    def send(self, code, obj, ctype="application/json"):
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def failing(self):
        with lock:
            counts["total"] += 1
            n = counts["total"]
        if fail_after is not None and n > fail_after:
            self.send(500, {"error": "mock failure"})
            return True
        return False

    def do_GET(self):
        if self.path == "/garbage":  # not HTTP at all
            self.wfile.write(b"SPAM 42\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/slow":  # answers after the client's timeout
            time.sleep(1.0)
            return self.send(200, {"ok": True})
        if self.path == "/count":
            with lock:
                return self.send(200, counts)
        if self.path == "/v2/models/identity":
            return self.send(200, META)
        if self.path == "/v2/models/identity/config":  # Triton's model config (perf_analyzer reads it)
            return self.send(200, {"name": "identity", "platform": "mock", "max_batch_size": 0,
                                   "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1, 16]},
                                             {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [-1]}],
                                   "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1, 16]}]})
        if self.path == "/v2":
            return self.send(200, {"name": "mock", "version": "0.0.0",
                                   "extensions": ["binary_tensor_data", "statistics"]})
        if self.path in ("/v2/health/live", "/v2/health/ready", "/v2/models/identity/ready"):
            return self.send(200, b"", "text/plain")
        if self.path == "/v2/models/image":
            return self.send(200, IMAGE_META)
        if self.path == "/v2/models/identity/stats":
            with lock:
                n = counts["infer"]
            s = {"model_stats": [{"name": "identity", "version": "1", "inference_count": n,
                                  "execution_count": n, "inference_stats": {
                                      "success": {"count": n, "ns": n * 100000},
                                      "fail": {"count": 0, "ns": 0},
                                      "queue": {"count": n, "ns": n * 20000},
                                      "compute_input": {"count": n, "ns": n * 5000},
                                      "compute_infer": {"count": n, "ns": n * 60000},
                                      "compute_output": {"count": n, "ns": n * 3000}}}]}
            return self.send(200, s)
        self.send(404, {"error": "not found"})

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.failing():
            return
        if self.path == "/v2/models/identity/infer":
            try:
                vals, binary = check_infer(body, self.headers)
            except Exception as e:  # a malformed request is a test failure
                with lock:
                    counts["bad"] += 1
                    counts["errors"].append(repr(e))
                return self.send(400, {"error": repr(e)})
            with lock:
                counts["x_test"] = self.headers.get("X-Test")
                counts["infer"] += 1
                counts["binary"] += binary
                if counts["first_values"] is None:
                    counts["first_values"] = vals
            return self.send(200, {"model_name": "identity", "outputs": [
                {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 16], "data": vals}]})
        if self.path == "/v2/models/image/infer":
            x = json.loads(body)["inputs"][0]
            ok = x["name"] == "data" and x["shape"] == [1, 3, 6, 8] and len(x["data"]) == 144
            with lock:
                counts["image"] = counts.get("image", 0) + ok
                counts.setdefault("image_values", []).append(x["data"])
            return self.send(200 if ok else 400, {"outputs": []})
        if self.path in ("/v1/chat/completions", "/v1/completions"):
            req = json.loads(body)
            chat = self.path.endswith("chat/completions")
            with lock:
                counts["chat" if chat else "completions"] += 1
            n = int(req["max_tokens"])
            usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": n + 7}
            if not req.get("stream"):
                msg = {"choices": [{"message": {"role": "assistant", "content": "tok " * n}}
                                   if chat else {"text": "tok " * n}], "usage": usage}
                return self.send(200, msg)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(obj):
                data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            if chat:
                chunk({"choices": [{"delta": {"role": "assistant", "content": ""}}], "usage": None})
            for i in range(n):
                d = {"delta": {"content": "t%d " % i}} if chat else {"text": "t%d " % i}
                chunk({"choices": [d], "usage": None})
            chunk({"choices": [], "usage": usage})
            chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            # llama.cpp's server closes the connection after a streamed answer although it
            # answered HTTP/1.1 without "Connection: close" (it even says Keep-Alive)
            self.close_connection = close_after_stream
            return
        self.send(404, {"error": "not found"})


def main():
    global fail_after, close_after_stream
    close_after_stream = "--close-after-stream" in sys.argv
    if "--fail-after" in sys.argv:
        fail_after = int(sys.argv[sys.argv.index("--fail-after") + 1])
    ThreadingHTTPServer.request_queue_size = 128  # many clients connect at once
    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
