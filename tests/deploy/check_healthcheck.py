#!/usr/bin/env python3
"""check_healthcheck.py: the images' HEALTHCHECK script against a real HTTP server.

deploy/docker/healthcheck.sh PORT PATH must exit 0 only for a 200 answer: 200 -> 0,
503 (not ready, e.g. loading or draining) -> 1, 404 -> 1, nothing listening -> non-zero.
The server here is python's http.server on loopback answering per path.
"""
import http.server
import pathlib
import socket
import subprocess
import sys
import threading

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "docker" / "healthcheck.sh"
CODES = {"/v2/health/ready": 200, "/v2/health/live": 200, "/draining": 503}


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        code = CODES.get(self.path, 404)
        body = b"{}"
        try:
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except ConnectionResetError:
            pass    # the script stops reading after the status line and closes: expected

    def log_message(self, *a):
        pass


def run(port, path):
    return subprocess.run(["bash", str(SCRIPT), str(port), path], capture_output=True, text=True,
                          timeout=30).returncode


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    with socket.socket() as s:          # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    cases = [(port, "/v2/health/ready", lambda rc: rc == 0, "0"),
             (port, "/v2/health/live", lambda rc: rc == 0, "0"),
             (port, "/draining", lambda rc: rc == 1, "1"),
             (port, "/missing", lambda rc: rc == 1, "1"),
             (dead, "/v2/health/ready", lambda rc: rc != 0, "non-zero")]
    failed = 0
    try:
        for p, path, ok, want in cases:
            rc = run(p, path)
            good = ok(rc)
            failed += not good
            print(f"{'ok' if good else 'FAIL'}: healthcheck.sh {'live port' if p == port else 'closed port'} "
                  f"{path} -> {rc} (want {want})")
    finally:
        srv.shutdown()
        srv.server_close()
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
