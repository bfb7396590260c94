"""Triton's logging extension (/v2/logging) against the real binary with tritonclient: the
settings change the live log of the running server at once (issue 19, item 4).

The server runs with one I/O thread, so requests are handled in order and a request's log
line is written before the next request is read: a line that has not appeared by the time
a later request's line has appeared never will."""
import json
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo

DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}


def wait_line(lines, pred, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, l in enumerate(list(lines)):
            if pred(l):
                return i
        time.sleep(0.02)
    raise AssertionError("no such log line:\n" + "".join(lines))


def infer(c, rid):
    inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
    inp.set_data_from_numpy(np.ones((1, 2), np.float32))
    c.infer("identity_fp32", [inp], request_id=rid)


def post(url, body):
    req = urllib.request.Request(url + "/v2/logging", data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@pytest.fixture(scope="module")
def server():
    with Server(args=["--io-threads", "1", "--model-control-mode", "explicit",
                      "--load-model", "identity_fp32"]) as s:
        s.wait_ready()
        s.client = httpclient.InferenceServerClient(s.hostport)
        yield s
        s.client.close()


def test_defaults(server):
    assert server.client.get_log_settings() == DEFAULTS


def test_verbose_level_turns_request_lines_on_and_off(server):
    c = server.client
    assert c.update_log_settings({"log_verbose_level": 1})["log_verbose_level"] == 1
    infer(c, "verbose-on-1")
    wait_line(server.log, lambda l: "request_id=verbose-on-1" in l)
    assert c.update_log_settings({"log_verbose_level": 0})["log_verbose_level"] == 0
    infer(c, "verbose-off-2")
    c.update_log_settings({"log_verbose_level": 1})
    infer(c, "verbose-on-3")
    wait_line(server.log, lambda l: "request_id=verbose-on-3" in l)
    assert not any("verbose-off-2" in l for l in server.log)
    c.update_log_settings({"log_verbose_level": 0})


def test_info_lines_off_and_on(server):
    c = server.client
    assert c.update_log_settings({"log_info": False})["log_info"] is False
    c.load_model("identity_int32")  # an INFO line "loaded model ... model=identity_int32"
    c.update_log_settings({"log_info": True})
    c.unload_model("identity_int32")  # INFO "unloading model 'identity_int32'"
    wait_line(server.log, lambda l: "unloading model 'identity_int32'" in l)
    assert not any("loaded model in" in l and "model=identity_int32" in l for l in server.log)


def test_json_format_is_live(server):
    c = server.client
    assert c.update_log_settings({"log_format": "json", "log_verbose_level": 1})["log_format"] == "json"
    infer(c, "json-line")
    i = wait_line(server.log, lambda l: "json-line" in l)
    line = json.loads(server.log[i])
    assert line["msg"] == "infer" and line["request_id"] == "json-line" and line["model"] == "identity_fp32"
    assert c.update_log_settings({"log_format": "default", "log_verbose_level": 0}) == DEFAULTS


@pytest.mark.parametrize("body,status,text", [
    ({"log_verbose_level": -1}, 400, "'log_verbose_level' must be a non-negative integer"),
    ({"log_verbose_level": "2"}, 400, "'log_verbose_level' must be a non-negative integer"),
    ({"log_verbose_level": 1.5}, 400, "'log_verbose_level' must be a non-negative integer"),
    ({"log_info": "yes"}, 400, "'log_info' must be a boolean"),
    ({"log_format": "xml"}, 400, "invalid argument for --log_format, got: xml"),
    ({"log_file": "/tmp/other.log"}, 501, "log file location can not be updated through network protocol"),
    ({"log_level": 3}, 400, "unknown logging setting 'log_level'"),
    # all or nothing: the good field is not applied either
    ({"log_verbose_level": 3, "log_error": 0}, 400, "'log_error' must be a boolean"),
])
def test_bad_settings_are_refused_and_change_nothing(server, body, status, text):
    code, got = post(server.url, body)
    assert code == status and text in got["error"], got
    assert server.client.get_log_settings() == DEFAULTS


def test_body_must_be_an_object(server):
    req = urllib.request.Request(server.url + "/v2/logging", data=b"[1]", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400
    assert "must be a JSON object" in json.load(e.value)["error"]


def test_tritonclient_raises_on_a_refused_update(server):
    with pytest.raises(InferenceServerException, match="invalid argument for --log_format"):
        server.client.update_log_settings({"log_format": "fancy"})


def wait_file_line(path, pred, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = path.read_text().splitlines(True) if path.exists() else []
        for l in lines:
            if pred(l):
                return l, lines
        time.sleep(0.02)
    raise AssertionError(f"no such line in {path}:\n" + (path.read_text() if path.exists() else ""))


def test_log_file(tmp_path):
    import re
    import signal
    import subprocess
    from cinfer_server import BIN
    path = tmp_path / "server.log"
    repo = copy_repo(["identity_fp32"])
    proc = subprocess.Popen([BIN, "serve", "--model-repository", repo, "--host", "127.0.0.1",
                             "--http-port", "0", "--grpc-port", "0", "--io-threads", "1", "--log-file", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # the listening line (with the port) goes to the file too
        line, _ = wait_file_line(path, lambda l: "http_port=" in l)
        port = int(re.search(r"http_port=(\d+)", line).group(1))
        c = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        assert c.get_log_settings()["log_file"] == str(path)
        c.update_log_settings({"log_verbose_level": 1})
        infer(c, "to-the-file")
        _, lines = wait_file_line(path, lambda l: "request_id=to-the-file" in l)
        assert any("loaded model in" in l for l in lines)
        c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "to-the-file" not in out and "http_port=" not in out  # nothing on stderr


def test_log_file_that_cannot_be_opened_is_a_cli_error(tmp_path):
    import subprocess
    from cinfer_server import BIN, EXAMPLES
    r = subprocess.run([BIN, "serve", "--model-repository", EXAMPLES, "--log-file",
                        str(tmp_path / "no" / "such" / "dir.log")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--log-file" in r.stderr and "No such file or directory" in r.stderr
