"""`cinfer streams` (src/streams) against the real binary: H.264 videos made at test time
from astronaut.png with ffmpeg (pan and zoom), decoded by libavcodec, sent through the face
pipelines in-process and over HTTP to `cinfer serve`, and compared frame by frame with the
independent NumPy + ONNX Runtime reference of vision_ref.py on the same frames (decoded to
RGB by the ffmpeg CLI).

Bad input: a corrupt file, a video with damaged packets, a network source that stalls and
one that disconnects, and a pipeline step that fails for one stream's frames: each is a
clear error for that frame or stream, and the other streams keep delivering.

The live page (/streams): polled until every stream has a frame, its JPEG checked for the
drawn box, and rendered in headless Chromium.

No wall-clock thresholds: runs are bounded by frame counts or stopped once a condition is
seen; waits are bounded polls."""
import http.server
import json
import os
import re
import signal
import socketserver
import subprocess
import tempfile
import threading
import time
import urllib.request

import numpy as np
import pytest

import vision_ref as vr
from cinfer_server import BIN, EXAMPLES, Server, copy_repo

VISION = os.path.realpath(os.path.join(EXAMPLES, "..", "..", "..", "shared", "models", "vision"))
ASTRONAUT = os.path.join(VISION, "astronaut.png")
PIPE_MODELS = ["retinaface_pre", "retinaface_mnet25_v2", "retinaface_post", "crop_ssrnet",
               "crop_expression", "crop_embedding", "ssrnet_age", "ssrnet_gender",
               "densenet_expression", "mobilefacenet_embedding", "decode_age", "decode_gender",
               "decode_expression", "normalize_embedding", "face_analytics_frames"]
DETECT_MODELS = ["ultraface_pre", "ultraface_rfb320", "ultraface_post", "face_detect_frames"]
N_FRAMES = 30


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", *args], check=True, timeout=120)


def make_video(path, frames=N_FRAMES, extra_vf="", container_args=()):
    """astronaut.png, zooming in 1.0 -> 1.25 while panning towards the face, 25 fps H.264."""
    vf = (f"zoompan=z='1+0.25*on/{frames}':x='(iw-iw/zoom)*0.4':y='(ih-ih/zoom)*0.2'"
          f":d={frames}:s=512x512:fps=25{extra_vf},format=yuv420p")
    ffmpeg("-loop", "1", "-i", ASTRONAUT, "-vf", vf, "-frames:v", str(frames),
           "-c:v", "libx264", "-preset", "veryfast", "-g", "10", *container_args, path)
    return path


def rgb_frames(path, w, h):
    """The video decoded to RGB by the ffmpeg CLI (an independent decoder path)."""
    raw = subprocess.run(["ffmpeg", "-loglevel", "error", "-i", path, "-f", "rawvideo",
                          "-pix_fmt", "rgb24", "-sws_flags", "bilinear", "-"],
                         check=True, capture_output=True, timeout=120).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="cinfer-streams-")
    make_video(os.path.join(d, "astro.mp4"))
    return d


def streams(*args, timeout=600):
    p = subprocess.run([BIN, "streams", *args], capture_output=True, text=True, timeout=timeout)
    for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer"):
        assert bad not in p.stderr, p.stderr
    return p


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


class LiveStreams:
    """`cinfer streams` left running (it stops on SIGINT); its stdout and stderr kept."""

    def __init__(self, args):
        self.proc = subprocess.Popen([BIN, "streams", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.log = []
        self.port = None
        seen = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.append(line)
                m = re.search(r"live page: http://127.0.0.1:(\d+)/streams", line)
                if m:
                    self.port = int(m.group(1))
                    seen.set()
            seen.set()

        self.t = threading.Thread(target=pump, daemon=True)
        self.t.start()
        assert seen.wait(120) and self.port, "".join(self.log)

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait(120)
        self.t.join(5)
        text = "".join(self.log)
        assert "AddressSanitizer" not in text and "runtime error:" not in text, text
        return rc, text


def wait_for(cond, what, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# ---- correctness -------------------------------------------------------------------------


def test_face_analytics_in_process_matches_the_reference_frame_by_frame(work):
    video = os.path.join(work, "astro.mp4")
    repo = copy_repo(PIPE_MODELS)
    out, summary = os.path.join(work, "fa.jsonl"), os.path.join(work, "fa.json")
    # 8 frames paced at 4 fps: whichever frames the pipeline keeps up with are delivered,
    # each compared with the reference on the very same frame of the (looping) file
    p = streams("--source", video, "--model", "face_analytics_frames", "--model-repository", repo,
                "--fps", "4", "--frames", "8", "--jsonl", out, "--json", summary)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = read_jsonl(out)
    assert lines and all("error" not in ln for ln in lines), lines
    s = json.load(open(summary))
    st = s["streams"][0]
    assert st["sent"] == 8 and st["delivered"] == len(lines) == 8 and st["errors"] == 0
    assert st["failed"] is False and s["total"]["delivered"] == 8
    frames = rgb_frames(video, 512, 512)
    models = vr.Models(VISION)
    for ln in lines:
        assert ln["width"] == 512 and ln["height"] == 512 and ln["latency_ms"] > 0
        o = ln["outputs"]
        ref = vr.analyse(models, frames[ln["frame"] % N_FRAMES])  # a slow run loops the file
        assert len(ref) == 1 and len(o["BOXES"]) == 1, (ln["frame"], o["BOXES"], len(ref))
        r = ref[0]
        assert vr.iou(np.array(o["BOXES"][0]), r["box"]) >= 0.9, (ln["frame"], o["BOXES"], r["box"])
        assert abs(o["AGE"][0][0] - r["age"]) <= 1.0, (ln["frame"], o["AGE"], r["age"])
        assert o["GENDER"][0][0] == r["gender"] and o["EXPRESSION"][0][0] == r["expression"]
        emb = np.array(o["EMBEDDING"][0])
        assert abs(np.linalg.norm(emb) - 1) < 1e-3 and float(emb @ r["embedding"]) >= 0.98


def test_detector_over_http_raw_frames_and_jpeg_match_the_reference(work):
    """face_detect_frames (raw RGB tensors) and face_detect (each frame JPEG-encoded, BYTES)
    on a `cinfer serve` over KServe HTTP, looping the 30-frame file past its end."""
    video = os.path.join(work, "astro.mp4")
    frames = rgb_frames(video, 512, 512)
    repo = copy_repo(DETECT_MODELS + ["vision_decode", "face_detect"])
    with Server(repo) as srv:
        srv.wait_ready()
        for model in ("face_detect_frames", "face_detect"):
            out = os.path.join(work, f"{model}.jsonl")
            p = streams("--source", video, "--streams", "2", "--model", model, "--url", srv.url,
                        "--fps", "50", "--frames", "40", "--jsonl", out)
            assert p.returncode == 0, p.stdout + p.stderr
            lines = read_jsonl(out)
            assert {ln["stream"] for ln in lines} == {0, 1}
            assert all("error" not in ln for ln in lines), [ln for ln in lines if "error" in ln]
            # the file loops: frame numbers go on past its 30 frames; 40 sent per stream
            # means frames beyond 30 were decoded (dropped ones are not sent)
            assert max(ln["frame"] for ln in lines) >= 39
            for ln in lines[:12]:
                ref_boxes, _ = vr.ultraface_detect(VISION, frames[ln["frame"] % N_FRAMES])
                b = ln["outputs"]["BOXES"]
                assert len(b) == 1 == len(ref_boxes), (model, ln["frame"], b, ref_boxes)
                assert vr.iou(np.array(b[0]), ref_boxes[0]) >= 0.9, (model, b, ref_boxes)
            assert re.search(r"total: 2 streams, [\d.]+ frames/s delivered", p.stdout), p.stdout


# ---- bad input ---------------------------------------------------------------------------


def test_a_corrupt_file_and_damaged_packets_fail_only_their_own_stream(work):
    video = os.path.join(work, "astro.mp4")
    junk = os.path.join(work, "junk.mp4")
    # fixed bytes: os.urandom's were now and then probed as some audio or image format,
    # which fails later ("no decodable video stream") than "cannot open"
    with open(junk, "wb") as f:
        f.write(np.random.default_rng(11).integers(0, 256, 20000, dtype=np.uint8).tobytes())
    # an MPEG-TS whose middle is overwritten: the demuxer resyncs, the decoder reports
    # damaged frames
    ts = make_video(os.path.join(work, "damaged.ts"), container_args=("-f", "mpegts"))
    data = bytearray(open(ts, "rb").read())
    rng = np.random.default_rng(7)
    for off in range(len(data) // 4, len(data) // 4 + 30000, 400):
        data[off + 10:off + 200] = rng.integers(0, 256, 190, dtype=np.uint8).tobytes()
    damaged = os.path.join(work, "damaged2.ts")
    open(damaged, "wb").write(bytes(data))
    missing = os.path.join(work, "no-such-file.mp4")
    out, summary = os.path.join(work, "bad.jsonl"), os.path.join(work, "bad.json")
    repo = copy_repo(DETECT_MODELS)
    p = streams("--source", video, "--source", junk, "--source", missing, "--source", damaged,
                "--model", "face_detect_frames", "--model-repository", repo, "--fps", "50",
                "--frames", "25", "--jsonl", out, "--json", summary)
    assert p.returncode == 1, p.stdout + p.stderr  # failures are the exit status
    lines = read_jsonl(out)
    fails = {ln["stream"]: ln["error"] for ln in lines if ln.get("stream_failed")}
    assert set(fails) == {1, 2}, fails
    assert junk in fails[1] and ("cannot" in fails[1] or "no decodable video stream" in fails[1]), fails[1]
    assert missing in fails[2] and "No such file" in fails[2], fails[2]
    s = json.load(open(summary))["streams"]
    assert s[0]["delivered"] == 25 and s[0]["errors"] == 0 and not s[0]["failed"]
    assert s[1]["failed"] and s[2]["failed"] and s[1]["delivered"] == 0
    # the damaged stream delivered frames; whatever did not decode is an error line for
    # that frame naming the source, never a crash
    assert s[3]["delivered"] > 0
    for ln in lines:
        if ln["stream"] == 3 and "error" in ln:
            assert damaged in ln["error"] and "frame" in ln, ln
    assert f"stream 1: video source '{junk}'" in p.stderr


class _Handler(http.server.BaseHTTPRequestHandler):
    """/good.ts: the whole file; /stall.ts: half, then nothing (connection kept open until
    the test ends); /drop.ts: half, then the connection closes."""
    data = b""
    release = threading.Event()

    def log_message(self, *a):
        pass

    def do_GET(self):
        half = len(self.data) // 2
        self.send_response(200)
        self.send_header("Content-Type", "video/mp2t")
        self.send_header("Content-Length", str(len(self.data)))
        self.end_headers()
        if self.path == "/good.ts":
            self.wfile.write(self.data)
        elif self.path == "/stall.ts":
            self.wfile.write(self.data[:half])
            self.wfile.flush()
            self.release.wait(300)
        else:
            self.wfile.write(self.data[:half])
            self.wfile.flush()
            self.connection.shutdown(2)


def test_a_stalled_and_a_disconnected_network_source_are_reported_and_others_go_on(work):
    ts = make_video(os.path.join(work, "net.ts"), frames=60, container_args=("-f", "mpegts"))
    _Handler.data = open(ts, "rb").read()
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    video = os.path.join(work, "astro.mp4")
    out, summary = os.path.join(work, "net.jsonl"), os.path.join(work, "net.json")
    repo = copy_repo(DETECT_MODELS)
    try:
        # --frames bounds the looping file stream; the network streams end earlier
        p = streams("--source", video, "--source", base + "/stall.ts", "--source", base + "/drop.ts",
                    "--source", base + "/good.ts", "--model", "face_detect_frames",
                    "--model-repository", repo, "--fps", "50", "--frames", "200",
                    "--stall-timeout-ms", "1500", "--jsonl", out, "--json", summary)
    finally:
        _Handler.release.set()
        srv.shutdown()
    assert p.returncode == 1, p.stdout + p.stderr
    lines = read_jsonl(out)
    fails = {ln["stream"]: ln["error"] for ln in lines if ln.get("stream_failed")}
    assert set(fails) == {1, 2}, (fails, p.stderr)
    assert "stall.ts" in fails[1] and "stalled" in fails[1] and "1500 ms" in fails[1], fails[1]
    assert "drop.ts" in fails[2] and ("disconnected" in fails[2] or "connection closed" in fails[2]), fails[2]
    s = json.load(open(summary))["streams"]
    assert s[0]["delivered"] == 200 and not s[0]["failed"]  # the file kept going
    assert s[1]["delivered"] > 0 and s[2]["delivered"] > 0  # before the trouble
    # the whole network file, then its clean end: every frame delivered or dropped (paced
    # at 50 fps, a frame due while the previous one is in the pipeline is dropped)
    assert s[3]["decoded"] == 60 and s[3]["delivered"] + s[3]["dropped"] == 60
    assert s[3]["delivered"] > 0 and not s[3]["failed"] and s[3]["errors"] == 0


def test_a_failing_pipeline_step_fails_those_frames_and_the_other_stream_goes_on(work):
    """Two faces side by side, and a crop step that refuses more than one face: every frame
    of that stream fails naming the ensemble step; the one-face stream is unharmed."""
    two = os.path.join(work, "two.mp4")
    ffmpeg("-loop", "1", "-i", ASTRONAUT, "-loop", "1", "-i", ASTRONAUT, "-filter_complex",
           "[0][1]hstack=inputs=2,format=yuv420p", "-frames:v", "10", "-r", "25",
           "-c:v", "libx264", "-preset", "veryfast", two)
    repo = copy_repo(PIPE_MODELS)
    cfg = os.path.join(repo, "crop_ssrnet", "config.pbtxt")
    with open(cfg, "a") as f:
        f.write('parameters { key: "max_faces" value: { string_value: "1" } }\n')
    out, summary = os.path.join(work, "step.jsonl"), os.path.join(work, "step.json")
    p = streams("--source", os.path.join(work, "astro.mp4"), "--source", two,
                "--model", "face_analytics_frames", "--model-repository", repo, "--fps", "2",
                "--frames", "3", "--jsonl", out, "--json", summary)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = read_jsonl(out)
    good = [ln for ln in lines if ln["stream"] == 0]
    bad = [ln for ln in lines if ln["stream"] == 1]
    assert len(good) == 3 and all("error" not in ln and len(ln["outputs"]["BOXES"]) == 1 for ln in good)
    assert len(bad) == 3 and all("error" in ln and not ln.get("stream_failed") for ln in bad), bad
    for ln in bad:
        assert "face_analytics_frames" in ln["error"] and "crop_ssrnet" in ln["error"], ln["error"]
        assert "max_faces" in ln["error"] or "faces" in ln["error"], ln["error"]
    s = json.load(open(summary))["streams"]
    assert s[0]["delivered"] == 3 and s[1]["errors"] == 3 and not s[1]["failed"]


def test_bad_flags_name_the_flag(work):
    p = streams("--source", "x.mp4", "--model", "m")
    assert p.returncode == 2 and "--model-repository" in p.stderr
    p = streams("--source", "x.mp4", "--model", "m", "--url", "http://127.0.0.1:1", "--every", "0")
    assert p.returncode == 2 and "--every: '0'" in p.stderr
    p = streams("--source", os.path.join(work, "astro.mp4"), "--model", "nosuch",
                "--model-repository", copy_repo([]))
    assert p.returncode == 1 and "nosuch" in p.stderr, p.stderr
    p = streams("--source", os.path.join(work, "astro.mp4"), "--model", "face_detect_frames",
                "--url", "http://127.0.0.1:1")
    assert p.returncode == 1 and "cannot connect to 127.0.0.1:1" in p.stderr, p.stderr


# ---- find-max ----------------------------------------------------------------------------


def test_find_max_writes_levels_a_plot_and_the_cost(work):
    """The search itself (not a machine's capacity): an SLO no frame can meet gives 0
    streams; every level is in the JSON and the plot. The fps target is one frame in 3 s,
    which any machine holds, so the SLO is what decides."""
    repo = copy_repo(DETECT_MODELS)
    js, svg = os.path.join(work, "fm.json"), os.path.join(work, "fm.svg")
    p = streams("--source", os.path.join(work, "astro.mp4"), "--model", "face_detect_frames",
                "--model-repository", repo, "--find-max", "--duration", "3", "--warmup", "0.2",
                "--max-streams", "2", "--slo-p99", "0.001", "--target-fps", "0.2", "--cost-per-hour", "1.5",
                "--json", js, "--plot", svg)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.load(open(js))
    assert r["max_streams_passing"] == 0 and r["levels"][0]["streams"] == 1
    assert not r["levels"][0]["pass"] and "SLO" in r["levels"][0]["why"]
    assert r["levels"][0]["delivered"] > 0 and r["levels"][0]["cost_per_1k_frames"] > 0
    text = open(svg).read()
    assert text.startswith("<?xml") and "1 streams (fail)" in text and "p99" in text
    # a generous SLO and target (one frame in 3 s is enough, whatever the machine's load):
    # the search climbs to the bound
    p = streams("--source", os.path.join(work, "astro.mp4"), "--model", "face_detect_frames",
                "--model-repository", repo, "--find-max", "--duration", "3", "--warmup", "0.2",
                "--max-streams", "2", "--slo-p99", "1e6", "--target-fps", "0.2", "--json", js)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.load(open(js))
    assert r["max_streams_passing"] == 2 and [lv["streams"] for lv in r["levels"]] == [1, 2]
    assert r["best"]["streams"] == 2 and r["best"]["pass"]


# ---- live page ---------------------------------------------------------------------------


def chromium(*args):
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", *args], capture_output=True, text=True,
                          timeout=120)


def test_live_page_shows_annotated_frames_in_headless_chromium(work):
    repo = copy_repo(PIPE_MODELS)
    live = LiveStreams(["--source", os.path.join(work, "astro.mp4"), "--streams", "2",
                        "--model", "face_analytics_frames", "--model-repository", repo,
                        "--fps", "5", "--duration", "600", "--http-port", "0"])
    try:
        def ready():
            _, ct, body = live.get("/streams/status.json")
            d = json.loads(body)
            return d if len(d["streams"]) == 2 and all(s["has_frame"] and s["boxes"] for s in d["streams"]) else None
        d = wait_for(ready, "a frame of each stream on the page")
        for s in d["streams"]:
            assert s["width"] == 512 and s["fps"] >= 0 and len(s["boxes"]) == 1
            label = s["boxes"][0]["label"]
            assert re.match(r"[01]\.\d\d age \d+ (male|female) \w+", label), label
        st, ct, jpg = live.get("/streams/0.jpg")
        assert st == 200 and ct == "image/jpeg" and jpg[:3] == b"\xff\xd8\xff"
        # the box is drawn into the frame: decode it and look for the green outline
        import cv2
        img = cv2.imdecode(np.frombuffer(jpg, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
        assert img.shape == (512, 512, 3)
        x1, y1, x2, y2 = [int(v) for v in d["streams"][0]["boxes"][0]["box"]]
        edge = img[max(y1, 0):y2, min(max(x1, 0), 511)].astype(int)
        green = (edge[:, 1] > 150) & (edge[:, 0] < 100) & (edge[:, 2] < 100)
        assert green.mean() > 0.5, edge[:5]
        st, ct, page = live.get("/streams")
        assert st == 200 and ct.startswith("text/html") and b"/streams/status.json" in page
        p = chromium("--virtual-time-budget=3000", "--dump-dom", f"http://127.0.0.1:{live.port}/streams")
        assert "2 streams," in p.stdout and 'src="/streams/0.jpg' in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
        assert re.search(r"class=\"lbl\"[^>]*>[01]\.\d\d age", p.stdout), p.stdout[-3000:]
        shot = os.path.join(os.environ.get("CINFER_BUILD_DIR", tempfile.gettempdir()), "streams-live.png")
        p = chromium("--window-size=1100,700", "--virtual-time-budget=3000", f"--screenshot={shot}",
                     f"http://127.0.0.1:{live.port}/streams")
        png = open(shot, "rb").read()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
        try:
            live.get("/nope")
            assert False, "expected 404"
        except urllib.error.HTTPError as e:
            assert e.code == 404
    finally:
        rc, text = live.stop()
    assert rc == 0, text
