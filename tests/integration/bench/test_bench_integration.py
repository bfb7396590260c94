#!/usr/bin/env python3
"""test_bench_integration.py: `cinfer bench` end to end against real peers. Stdlib only.
  - nginx (Debian nginx-light) on an ephemeral loopback port with a temp config serving a
    static body: request counts reported by the tool equal the lines in nginx's access
    log (GET, POST, open loop), zero errors; JSON/CSV/SVG outputs are well formed;
    Ctrl-C saves partial results; unreachable server and bad flags fail clearly.
  - mock_server.py (KServe v2 + OpenAI stand-in): JSON and binary tensors validated by
    the server, --input-data values arrive as given, server-side breakdown, streamed
    token counts, --images tensors (layout, channel order, mean/std), error kinds
    (protocol, timeout); a server that starts failing mid-run gives a clear non-zero exit.
No timing thresholds: only counts, exit codes and messages are asserted.
usage: test_bench_integration.py PATH/TO/cinfer"""
import csv, json, os, shutil, signal, socket, struct, subprocess, sys, tempfile, time, zlib
import xml.etree.ElementTree as ET

CINFER = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
TMP = tempfile.mkdtemp(prefix="cinfer-bench-it-")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, what, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise RuntimeError("timed out waiting for " + what)


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def bench(*args, timeout=60):
    p = subprocess.run([CINFER, "bench", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def start_nginx():
    port, port_close = free_port(), free_port()
    while port_close == port:
        port_close = free_port()
    conf = os.path.join(TMP, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {TMP}/nginx.pid; error_log {TMP}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log {TMP}/access.log;
  client_body_temp_path {TMP}/body; proxy_temp_path {TMP}/proxy; fastcgi_temp_path {TMP}/fcgi;
  uwsgi_temp_path {TMP}/uwsgi; scgi_temp_path {TMP}/scgi;
  keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{port};
    location / {{ default_type text/plain; return 200 "hello from nginx\\n"; }} }}
  server {{ listen 127.0.0.1:{port_close}; keepalive_timeout 0;
    location / {{ default_type text/plain; return 200 "one per connection\\n"; }} }}
}}""")
    proc = subprocess.Popen(["nginx", "-c", conf, "-p", TMP], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    wait_for(lambda: port_open(port) and port_open(port_close), "nginx to listen")
    return proc, port, port_close


def log_lines():
    try:
        with open(os.path.join(TMP, "access.log")) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def test_nginx():
    proc, port, port_close = start_nginx()
    url = f"http://127.0.0.1:{port}"
    try:
        base = len(log_lines())  # the readiness probe is not logged (no request)
        j = os.path.join(TMP, "get.json")
        rc, out, err = bench("--url", url, "--http-get", "/", "--concurrency", 4, "--requests", 3000,
                             "--warmup-ms", 0, "--json", j, "--quiet")
        check(rc == 0, f"GET run exit {rc}: {err}")
        r = json.load(open(j))
        lv = r["levels"][0]
        lines = log_lines()[base:]
        check(lv["requests"] == 3000, f"GET: tool counted {lv['requests']} != 3000")
        check(len(lines) == 3000, f"GET: nginx logged {len(lines)} != 3000")
        check(lv["errors"] == 0, f"GET: errors {lv['errors_by_kind']}")
        check(all('"GET / HTTP/1.1" 200' in l for l in lines), "GET: every log line is GET / 200")
        check(lv["latency"]["count"] == 3000, "GET: latency histogram holds every request")
        check(0 < lv["latency"]["p50_us"] <= lv["latency"]["p99_us"] <= lv["latency"]["max_us"],
              "GET: percentiles ordered")

        body = os.path.join(TMP, "body.bin")
        with open(body, "wb") as f:
            f.write(b"x" * 1000)
        base = len(log_lines())
        c, s = os.path.join(TMP, "post.csv"), os.path.join(TMP, "post.svg")
        rc, out, err = bench("--url", url, "--http-post", "/", "--body", body, "--concurrency", "1,3",
                             "--requests", 500, "--warmup-ms", 0, "--csv", c, "--plot", s,
                             "--json", j, "--quiet", "--threads", 2)
        check(rc == 0, f"POST run exit {rc}: {err}")
        lines = log_lines()[base:]
        check(len(lines) == 1000, f"POST: nginx logged {len(lines)} != 2 x 500")
        check(all('"POST / HTTP/1.1" 200' in l for l in lines), "POST: every log line is POST / 200")
        rows = list(csv.DictReader(open(c)))
        check([int(r["requests"]) for r in rows] == [500, 500], f"POST csv requests {rows}")
        check([r["label"] for r in rows] == ["c=1", "c=3"], "POST csv labels")
        svg = ET.parse(s).getroot()
        ns = "{http://www.w3.org/2000/svg}"
        check(len(svg.findall(f"{ns}polyline")) == 5, "SVG has 5 percentile curves")
        texts = " ".join(t.text or "" for t in svg.iter(f"{ns}text"))
        check("latency (ms" in texts and "throughput" in texts and "p99" in texts, "SVG axes/legend")
        check("c=1" in out and "c=3" in out and "p99 ms" in out, "table printed on stdout")

        # a server that closes every connection after one response (Connection: close)
        base = len(log_lines())
        rc, out, err = bench("--url", f"http://127.0.0.1:{port_close}", "--http-get", "/", "--concurrency", 3,
                             "--requests", 600, "--json", j, "--quiet")
        lv = json.load(open(j))["levels"][0]
        check(rc == 0 and lv["requests"] == 600 and lv["errors"] == 0, f"Connection: close: {rc} {err}")
        check(len(log_lines()) - base == 600, f"Connection: close: nginx logged {len(log_lines()) - base}")

        # open loop, fixed count
        base = len(log_lines())
        rc, out, err = bench("--url", url, "--http-get", "/", "--rate", 400, "--poisson", "--requests", 200,
                             "--json", j, "--quiet")
        check(rc == 0, f"rate run exit {rc}: {err}")
        check(len(log_lines()) - base == 200, f"rate: nginx logged {len(log_lines()) - base} != 200")
        check(json.load(open(j))["levels"][0]["loop"] == "open", "rate: open loop")

        # windowed closed-loop run: reaches a result and counts match the log exactly
        # (warm-up and drained requests are logged but not reported, so only >=)
        base = len(log_lines())
        rc, out, err = bench("--url", url, "--http-get", "/", "--concurrency", 2, "--warmup-ms", 100,
                             "--window-ms", 100, "--max-windows", 5, "--json", j, "--quiet")
        check(rc == 0, f"windowed exit {rc}: {err}")
        lv = json.load(open(j))["levels"][0]
        check(3 <= lv["windows"] <= 5, f"windows {lv['windows']}")
        check(lv["requests"] > 0 and len(log_lines()) - base >= lv["requests"], "windowed counts")

        # load modes: stress ramp and SLO search (structure and exit codes, no timings)
        fast = ["--warmup-ms", 50, "--window-ms", 100, "--max-windows", 3, "--quiet"]
        rc, out, err = bench("--url", url, "--http-get", "/", "--stress", 100, "--stress-steps", 2,
                             "--concurrency", 2, "--max-connections", 64, "--json", j, *fast)
        r = json.load(open(j))
        check(rc in (0, 1) and r["mode"] == "stress" and r["capacity_rps"] > 0, f"stress: {rc} {err}")
        check([l["label"].split(" ")[0] for l in r["levels"]] == ["capacity", "50%", "100%"],
              f"stress levels {[l['label'] for l in r['levels']]}")
        check(abs(r["levels"][2]["target_rate"] - r["capacity_rps"]) < 1e-6 * r["capacity_rps"],
              "stress: 100% level runs at the measured capacity")
        rc, out, err = bench("--url", url, "--http-get", "/", "--slo-p99", 0.001, *fast)
        check(rc == 1 and "cannot be met" in err, f"impossible SLO: {rc} {err}")
        rc, out, err = bench("--url", url, "--http-get", "/", "--slo-p99", 60000, "--slo-iterations", 2,
                             "--concurrency", 2, "--max-connections", 64, "--json", j, *fast)
        r = json.load(open(j))
        check(rc == 0 and r["slo_rps"] > 0 and len(r["levels"]) == 4, f"generous SLO: {rc} {err}")

        # Ctrl-C: partial results saved, exit 130
        p = subprocess.Popen([CINFER, "bench", "--url", url, "--http-get", "/", "--concurrency", "2",
                              "--requests", str(10**9), "--json", j, "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        base = len(log_lines())
        wait_for(lambda: len(log_lines()) - base >= 200, "requests before Ctrl-C")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        check(p.returncode == 130, f"Ctrl-C exit {p.returncode}: {err}")
        r = json.load(open(j))
        check(r["interrupted"] is True and r["levels"][0]["requests"] >= 200, "Ctrl-C JSON saved")
        check("INTERRUPTED" in out and "interrupted" in err, "Ctrl-C says so")
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    # nginx gone: unreachable server
    rc, out, err = bench("--url", url, "--http-get", "/", "--requests", 10)
    check(rc == 1 and "cannot connect" in err and "refused" in err, f"unreachable: {rc} {err}")


def test_flags():
    rc, out, err = bench("--url", "http://127.0.0.1:1", "--http-get", "/", "--concurrency", "0")
    check(rc == 2 and "--concurrency '0'" in err, f"bad flag: {rc} {err}")
    rc, out, err = bench("--help")
    check(rc == 0 and "--slo-p99" in out, "help")


def start_mock(*extra):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "mock_server.py"), *extra],
                         stdout=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    return p, port


def mock_counts(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"GET /count HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def write_png(path, w, h, rgb):
    """A solid-colour 8-bit RGB PNG, written with zlib (no imaging library needed)."""
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    raw = b"".join(b"\x00" + bytes(rgb) * w for _ in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_images():
    p, port = start_mock()
    url = f"http://127.0.0.1:{port}"
    d = os.path.join(TMP, "imgs")
    os.makedirs(d)
    write_png(os.path.join(d, "a.png"), 20, 10, (200, 10, 30))
    write_png(os.path.join(d, "b.png"), 5, 7, (0, 128, 255))
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("ignored")
    try:
        rc, out, err = bench("--url", url, "--model", "image", "--images", d, "--requests", 4, "--quiet")
        check(rc == 0, f"images: {rc} {err}")
        c = mock_counts(port)
        check(c.get("image") == 4, f"image requests {c.get('image')}")
        # requests alternate a.png, b.png; NCHW planes of 48 values, raw 0..255
        v = c["image_values"]
        check(v[0][:48] == [200] * 48 and v[0][48:96] == [10] * 48 and v[0][96:] == [30] * 48,
              f"a.png as NCHW raw {v[0][:3]}, {v[0][48:51]}, {v[0][96:99]}")
        check(v[1][:48] == [0] * 48 and v[1][96:] == [255] * 48, "b.png as NCHW raw")
        rc, out, err = bench("--url", url, "--model", "image", "--images", d, "--requests", 1,
                             "--image-mean", "127.5", "--image-std", "127.5", "--image-bgr", "--quiet")
        check(rc == 0, f"images normalised: {rc} {err}")
        v = mock_counts(port)["image_values"][-1]
        check(abs(v[0] - (30 - 127.5) / 127.5) < 1e-6 and abs(v[96] - (200 - 127.5) / 127.5) < 1e-6,
              f"BGR + mean/std: {v[0]} {v[96]}")
        rc, out, err = bench("--url", url, "--model", "identity", "--shape", "TEXT:1", "--images", d,
                             "--requests", 1, "--quiet")
        check(rc == 1 and "no image input" in err, f"no image input: {rc} {err}")
        empty = os.path.join(TMP, "empty")
        os.makedirs(empty)
        rc, out, err = bench("--url", url, "--model", "image", "--images", empty, "--requests", 1, "--quiet")
        check(rc == 1 and "no .png" in err, f"empty image dir: {rc} {err}")
    finally:
        p.terminate()
        p.wait()


def test_mock():
    p, port = start_mock()
    url = f"http://127.0.0.1:{port}"
    j = os.path.join(TMP, "m.json")
    try:
        rc, out, err = bench("--url", url, "--model", "identity", "--concurrency", 2, "--requests", 40,
                             "--warmup-ms", 0, "--quiet")
        check(rc == 1 and "TEXT" in err and "--shape" in err, f"dynamic dim needs --shape: {rc} {err}")
        rc, out, err = bench("--url", url, "--model", "nosuch", "--requests", 4, "--quiet")
        check(rc == 1 and "HTTP 404" in err, f"unknown model: {rc} {err}")
        kc = os.path.join(TMP, "k.csv")
        rc, out, err = bench("--url", url, "--model", "identity", "--shape", "TEXT:3", "--concurrency", 2,
                             "--requests", 40, "--warmup-ms", 0, "--json", j, "--csv", kc, "--quiet")
        row = next(csv.DictReader(open(kc)))
        check(abs(float(row["server_compute_infer_us"]) - 60.0) < 1e-3, f"csv server columns {row}")
        check(rc == 0, f"kserve json: {rc} {err}")
        lv = json.load(open(j))["levels"][0]
        check(lv["requests"] == 40, "kserve json count")
        check(lv.get("server", {}).get("requests") == 40, f"server breakdown {lv.get('server')}")
        check(abs(lv["server"]["compute_infer_us"] - 60.0) < 1e-6, "server compute_infer per request")
        rc, out, err = bench("--url", url, "--model", "identity", "--shape", "TEXT:2", "--binary",
                             "--requests", 30, "--header", "X-Test: hello there", "--quiet")
        check(rc == 0, f"kserve binary: {rc} {err}")
        c = mock_counts(port)
        check(c["infer"] == 70 and c["binary"] == 30 and c["bad"] == 0, f"mock counts {c}")
        check(c.get("x_test") == "hello there", f"--header reaches the server: {c.get('x_test')}")

        data = os.path.join(TMP, "in.json")
        vals = [float(i) / 4 for i in range(16)]
        json.dump({"data": [{"INPUT0": [vals], "TEXT": {"content": ["a", "b"], "shape": [2]}}]}, open(data, "w"))
        p.terminate(); p.wait()
        p, port = start_mock()
        url = f"http://127.0.0.1:{port}"
        rc, out, err = bench("--url", url, "--model", "identity", "--input-data", data, "--requests", 5, "--quiet")
        check(rc == 0, f"input-data: {rc} {err}")
        c = mock_counts(port)
        check(c["first_values"] == vals and c["infer"] == 5, f"input-data values {c}")
        json.dump({"data": [{"INPUT0": [1, 2, 3], "TEXT": ["a"]}]}, open(data, "w"))
        rc, out, err = bench("--url", url, "--model", "identity", "--input-data", data, "--requests", 5, "--quiet")
        check(rc == 1 and "INPUT0" in err and "3 values" in err, f"bad input-data: {rc} {err}")

        rc, out, err = bench("--url", url, "--openai", "chat", "--model", "m", "--stream", "--max-tokens", 12,
                             "--concurrency", 2, "--requests", 10, "--json", j, "--cost-per-hour", 3,
                             "--plot", os.path.join(TMP, "llm.svg"), "--quiet")
        check(rc == 0, f"openai stream: {rc} {err}")
        lv = json.load(open(j))["levels"][0]
        check(lv["output_tokens"] == 120 and lv["prompt_tokens"] == 70, f"usage tokens {lv['output_tokens']}")
        check(lv["ttft"]["count"] == 10 and lv["itl"]["count"] == 110 and lv["tpot"]["count"] == 10,
              f"ttft/itl/tpot counts {lv['ttft']['count']} {lv['itl']['count']}")
        check(lv["cost_per_1m_output_tokens"] > 0 and "$/1M out tokens" in out, "token cost")
        svg = ET.parse(os.path.join(TMP, "llm.svg")).getroot()
        lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
        check(len(lines) == 9, f"LLM plot: latency chart (5 curves) + TTFT/ITL chart (4): {len(lines)}")
        rc, out, err = bench("--url", url, "--openai", "completions", "--model", "m", "--max-tokens", 5,
                             "--requests", 4, "--json", j, "--quiet")
        check(rc == 0 and json.load(open(j))["levels"][0]["output_tokens"] == 20, f"openai plain: {rc} {err}")
    finally:
        p.terminate()
        p.wait()

    # error kinds: an unparseable response, and no response within --timeout-ms
    p, port = start_mock()
    try:
        rc, out, err = bench("--url", f"http://127.0.0.1:{port}", "--http-get", "/garbage", "--requests", 5,
                             "--json", j, "--quiet")
        lv = json.load(open(j))["levels"][0]
        check(rc == 1 and lv["errors_by_kind"]["protocol"] >= 1 and "status line" in err,
              f"garbage response: {rc} {lv['errors_by_kind']} {err}")
        rc, out, err = bench("--url", f"http://127.0.0.1:{port}", "--http-get", "/slow", "--requests", 2,
                             "--timeout-ms", 100, "--json", j, "--quiet")
        lv = json.load(open(j))["levels"][0]
        check(rc == 1 and lv["errors_by_kind"]["timeout"] == 2 and "no response within 100 ms" in err,
              f"timeouts: {rc} {lv['errors_by_kind']} {err}")
    finally:
        p.terminate()
        p.wait()

    # a server that closes every connection after a streamed answer without saying so
    # (llama.cpp's server): the next request on the stale connection is resent on a new one,
    # not counted as an error, and no request is lost or sent twice
    p, port = start_mock("--close-after-stream")
    try:
        for conc in (1, 3):
            before = mock_counts(port)["completions"]
            rc, out, err = bench("--url", f"http://127.0.0.1:{port}", "--openai", "completions", "--model", "m",
                                 "--stream", "--max-tokens", 4, "--concurrency", conc, "--requests", 9,
                                 "--json", j, "--quiet")
            lv = json.load(open(j))["levels"][0]
            sent = mock_counts(port)["completions"] - before
            check(rc == 0 and lv["errors"] == 0 and lv["requests"] == 9 and lv["output_tokens"] == 36 and sent == 9,
                  f"server closing after each stream, c={conc}: {rc} {lv['errors_by_kind']} "
                  f"{lv['requests']} {sent} {err}")
    finally:
        p.terminate()
        p.wait()

    # a server that starts failing mid-run
    p, port = start_mock("--fail-after", "30")
    try:
        rc, out, err = bench("--url", f"http://127.0.0.1:{port}", "--http-post", "/v1/completions",
                             "--body", os.path.join(HERE, "openai_body.json"), "--concurrency", 2,
                             "--warmup-ms", 0, "--window-ms", 200, "--max-windows", 20, "--json", j)
        check(rc == 1 and "HTTP 500" in err, f"failing server: {rc} {err}")
        lv = json.load(open(j))["levels"][0]
        check(lv["http_status_errors"].get("500", 0) > 0, "HTTP 500 counted by code")
    finally:
        p.terminate()
        p.wait()


try:
    if not shutil.which("nginx"):
        print("nginx is not installed (Debian nginx-light; see scripts/setup.sh)")
        sys.exit(1)
    test_flags()
    test_nginx()
    test_mock()
    test_images()
finally:
    shutil.rmtree(TMP, ignore_errors=True)
print("FAILED: %d checks" % len(failures) if failures else "all bench integration checks passed")
sys.exit(1 if failures else 0)
