"""The live video page served by `cinfer serve --streams-page` (issue 21, item 5): `cinfer
streams --publish URL` pushes each stream's latest annotated frame to the server's board,
which serves the same page as `cinfer streams --http-port` at /streams on the KServe port.

Checked against the real binaries on loopback: the published boxes against the independent
UltraFace reference of vision_ref.py on the same frame, the JPEG's drawn outline, the page
rendered in headless Chromium (screenshot), hostile pushes refused with 400 and a message
while the board keeps its entries, and a server without the flag answering 404.

No wall-clock thresholds: the publishing run is bounded by a frame count, and
`cinfer streams` sends every stream's last state before it exits, so the board is read
once the run has ended."""
import json
import os
import re
import tempfile
import urllib.error
import urllib.request

import numpy as np
import pytest

import vision_ref as vr
from cinfer_server import Server, copy_repo
from test_streams import (ASTRONAUT, DETECT_MODELS, N_FRAMES, VISION, chromium, make_video,  # noqa: F401
                          rgb_frames, streams)


@pytest.fixture(scope="module")
def video():
    d = tempfile.mkdtemp(prefix="cinfer-streams-serve-")
    return make_video(os.path.join(d, "astro.mp4"))


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read()


def post(url, body, headers):
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def push(srv, stream, header, jpeg=b""):
    h = json.dumps(header).encode() if isinstance(header, dict) else header
    return post(f"{srv.url}/streams/{stream}", h + jpeg,
                {"Content-Type": "application/octet-stream", "Streams-Header-Length": str(len(h))})


def test_serve_shows_the_published_streams_in_headless_chromium(video):
    repo = copy_repo(DETECT_MODELS)
    frames = rgb_frames(video, 512, 512)
    with Server(repo, args=["--streams-page"]) as srv:
        srv.wait_ready()
        st, ct, body = get(srv.url + "/streams/status.json")
        assert st == 200 and json.loads(body) == {"streams": []}
        p = streams("--source", video, "--streams", "2", "--model", "face_detect_frames",
                    "--url", srv.url, "--publish", srv.url, "--fps", "50", "--frames", "40")
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"publishing to {srv.url}/streams" in p.stdout
        st, ct, body = get(srv.url + "/streams/status.json")
        d = json.loads(body)
        assert [s["stream"] for s in d["streams"]] == [0, 1], d
        for s in d["streams"]:
            assert s["source"] == video and s["has_frame"] and s["width"] == 512 == s["height"]
            assert s["delivered"] > 0 and s["errors"] == 0 and "last_error" not in s
            assert len(s["boxes"]) == 1, s
            ref, _ = vr.ultraface_detect(VISION, frames[s["frame"] % N_FRAMES])
            assert len(ref) == 1 and vr.iou(np.array(s["boxes"][0]["box"]), ref[0]) >= 0.9, (s, ref)
        st, ct, jpg = get(srv.url + "/streams/1.jpg")
        assert st == 200 and ct == "image/jpeg" and jpg[:3] == b"\xff\xd8\xff"
        import cv2
        img = cv2.imdecode(np.frombuffer(jpg, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
        assert img.shape == (512, 512, 3)
        x1, y1, x2, y2 = [int(v) for v in d["streams"][1]["boxes"][0]["box"]]
        edge = img[max(y1, 0):y2, min(max(x1, 0), 511)].astype(int)
        green = (edge[:, 1] > 150) & (edge[:, 0] < 100) & (edge[:, 2] < 100)
        assert green.mean() > 0.5, edge[:5]
        # the KServe API is on the same port, unharmed
        st, _, body = get(srv.url + "/v2/models/face_detect_frames")
        assert st == 200 and json.loads(body)["name"] == "face_detect_frames"
        st, ct, page = get(srv.url + "/streams")
        assert st == 200 and ct.startswith("text/html") and b"/streams/status.json" in page
        r = chromium("--virtual-time-budget=3000", "--dump-dom", f"{srv.url}/streams")
        assert "2 streams," in r.stdout and 'src="/streams/0.jpg' in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
        assert re.search(r"class=\"lbl\"[^>]*>1\.00<", r.stdout), r.stdout[-3000:]
        shot = os.path.join(os.environ.get("CINFER_BUILD_DIR", tempfile.gettempdir()), "streams-live-serve.png")
        chromium("--window-size=1100,700", "--virtual-time-budget=3000", f"--screenshot={shot}", f"{srv.url}/streams")
        png = open(shot, "rb").read()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000


def test_hostile_pushes_are_refused_and_the_board_keeps_its_entries():
    jpeg = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "images", "streams-live.png"), "rb").read()
    with Server(copy_repo(DETECT_MODELS), args=["--streams-page"]) as srv:
        srv.wait_ready()
        good = {"source": "cam0", "width": 64, "height": 48, "fps": 12.5, "frame": 7, "delivered": 7,
                "dropped": 1, "errors": 0, "boxes": [{"box": [1, 2, 30, 40], "label": "face"}]}
        fake_jpeg = b"\xff\xd8\xff\xe0" + b"\0" * 60
        assert push(srv, 0, good, fake_jpeg) == (200, b"{}")
        bad = [
            (0, good, jpeg, "not a JPEG"),                       # a PNG after the header
            (512, good, fake_jpeg, "stream number from 0 to 511"),
            ("x", good, fake_jpeg, "stream number"),
            (0, b"{\"source\":", fake_jpeg, "JSON header"),         # cut short
            (0, b"[1,2]", b"", "an object expected"),
            (0, {**good, "source": 5}, fake_jpeg, "'source'"),
            (0, {k: v for k, v in good.items() if k != "source"}, fake_jpeg, "'source' (a string) is required"),
            (0, {**good, "width": 100000}, fake_jpeg, "'width' and 'height'"),
            (0, {**good, "width": 0}, fake_jpeg, "a frame needs 'width' and 'height'"),
            (0, {**good, "frame": -1}, fake_jpeg, "non-negative integers"),
            (0, {**good, "fps": "fast"}, fake_jpeg, "'fps'"),
            (0, {**good, "boxes": [{"box": [1, 2, 3]}]}, fake_jpeg, "boxes[0].box"),
            (0, {**good, "boxes": [{"box": [1, 2, 3, "4"]}]}, fake_jpeg, "boxes[0].box[3]"),
            (0, {**good, "boxes": [{"box": [1, 2, 3, 4], "label": 7}]}, fake_jpeg, "boxes[0].label"),
            (0, {**good, "boxes": [{"box": [0, 0, 1, 1]}] * 1025}, fake_jpeg, "at most 1024 boxes"),
            (0, {**good, "last_error": "x" * 2000}, fake_jpeg, "at most 1024 bytes"),
        ]
        for stream, header, body, needle in bad:
            st, msg = push(srv, stream, header, body)
            assert st == 400 and needle in json.loads(msg)["error"], (needle, st, msg)
        st, msg = post(f"{srv.url}/streams/0", b"{}", {})
        assert st == 400 and "Streams-Header-Length" in json.loads(msg)["error"]
        st, msg = post(f"{srv.url}/streams/0", b"{}", {"Streams-Header-Length": "99"})
        assert st == 400 and "within the 2-byte body" in json.loads(msg)["error"]
        st, msg = post(f"{srv.url}/streams/0", b"{}", {"Streams-Header-Length": "-1"})
        assert st == 400 and "byte count" in json.loads(msg)["error"]
        st, msg = post(f"{srv.url}/streams", b"", {})
        assert st == 405 and "GET" in json.loads(msg)["error"]
        # the board still holds the good entry, exactly as pushed
        d = json.loads(get(srv.url + "/streams/status.json")[2])
        assert d["streams"] == [{"stream": 0, "source": "cam0", "has_frame": True, "frame": 7, "width": 64,
                                 "height": 48, "fps": 12.5, "delivered": 7, "dropped": 1, "errors": 0,
                                 "boxes": [{"box": [1.0, 2.0, 30.0, 40.0], "label": "face"}]}], d
        assert get(srv.url + "/streams/0.jpg")[2] == fake_jpeg
        # an update without a frame (a stream that failed) keeps the last frame and shows the error
        st, _ = push(srv, 0, {"source": "cam0", "errors": 1, "last_error": "cam0: stalled"})
        assert st == 200
        s = json.loads(get(srv.url + "/streams/status.json")[2])["streams"][0]
        assert s["has_frame"] and s["last_error"] == "cam0: stalled" and s["width"] == 64 and s["boxes"] == []
        assert get(srv.url + "/streams/0.jpg")[2] == fake_jpeg
        with pytest.raises(urllib.error.HTTPError) as e:
            get(srv.url + "/streams/1.jpg")
        assert e.value.code == 404


def test_without_the_flag_serve_has_no_streams_page():
    with Server(copy_repo(DETECT_MODELS)) as srv:
        srv.wait_ready()
        for method in ("GET", "POST"):
            req = urllib.request.Request(srv.url + "/streams/0", data=b"{}" if method == "POST" else None,
                                         method=method)
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=10)
            assert e.value.code == 404


def test_publish_flag_errors_name_the_flag(video):
    for url, needle in (("ftp://x:1", "only http://HOST:PORT"), ("http://127.0.0.1:1/v2", "no path"),
                        ("http://:80", "no host")):
        p = streams("--source", video, "--model", "face_detect_frames", "--url", "http://127.0.0.1:1",
                    "--publish", url, "--frames", "1")
        assert p.returncode != 0 and "--publish" in p.stderr and needle in p.stderr, p.stderr
    # the pipeline's --url has the same rules (a path was silently ignored before)
    p = streams("--source", video, "--model", "face_detect_frames", "--url", "http://127.0.0.1:1/v2/models")
    assert p.returncode == 1 and "--url 'http://127.0.0.1:1/v2/models': give http://HOST:PORT, no path" in p.stderr
    p = streams("--source", video, "--model", "face_detect_frames", "--url", "http://127.0.0.1:1",
                "--publish", "http://127.0.0.1:1", "--http-port", "0")
    assert p.returncode == 2 and "--http-port and --publish: give one of them" in p.stderr, p.stderr
