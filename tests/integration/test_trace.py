"""Triton's trace extension against the real binary with tritonclient (issue 19, item 4):
the settings (global and per model), `cinfer serve --trace-config`, and their real effect:
trace files in Triton's JSON trace format with each request's stage timestamps, sampled by
trace_rate, limited by trace_count, rotated by log_frequency."""
import glob
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import BIN, EXAMPLES, Server, copy_repo

STAGES = ["HTTP_RECV_START", "HTTP_RECV_END", "REQUEST_START", "QUEUE_START", "COMPUTE_START",
          "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
          "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END"]
OFF = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1", "log_frequency": "0",
       "trace_file": "", "trace_mode": "triton"}


def infer(c, rid, model="identity_fp32", data=(1.0, 2.0, 3.0)):
    x = np.array([data], np.float32)
    inp = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(c.infer(model, [inp], request_id=rid).as_numpy("OUTPUT0"), x)


def traces(entries):
    """Triton's trace file -> {id: {"model_name", "model_version", "request_id", "ts": {name: ns},
    "tensors": [...]}}, checking every entry's shape on the way."""
    out = {}
    for e in entries:
        t = out.setdefault(e["id"], {"ts": {}, "tensors": []})
        if "model_name" in e:
            assert isinstance(e["model_version"], int)
            t.update(model_name=e["model_name"], model_version=e["model_version"],
                     request_id=e.get("request_id"))
        elif "timestamps" in e:
            (ts,) = e["timestamps"]
            assert ts["name"] not in t["ts"], e
            t["ts"][ts["name"]] = ts["ns"]
        else:
            assert e["activity"] in ("TENSOR_QUEUE_INPUT", "TENSOR_BACKEND_OUTPUT"), e
            t["tensors"].append((e["activity"], e["tensor"]))
    return out


def wait_file(path, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            try:
                with open(path) as f:
                    return json.load(f)
            except ValueError:
                pass  # still being written
        time.sleep(0.02)
    raise AssertionError(f"{path} never appeared: {sorted(glob.glob(path + '*'))}")


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def check_stages(t):
    """Every stage of our path, in the order the request went through them."""
    assert list(t["ts"]) == [s for s in STAGES if s in t["ts"]]
    assert set(t["ts"]) == set(STAGES), sorted(t["ts"])
    ns = [t["ts"][s] for s in STAGES]
    assert ns == sorted(ns), list(zip(STAGES, ns))


def serve(tmp_path, *trace_args, models=("identity_fp32",), extra=()):
    repo = copy_repo(list(models))
    args = ["--io-threads", "1"] + [a for t in trace_args for a in ("--trace-config", t)] + list(extra)
    return Server(repo, args)


def test_defaults_and_off_writes_nothing(tmp_path):
    with serve(tmp_path) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        assert c.get_trace_settings() == OFF
        assert c.get_trace_settings(model_name="identity_fp32") == OFF
        assert "trace" in c.get_server_metadata()["extensions"]
        # tracing on needs a file (Triton's check and words)
        with pytest.raises(InferenceServerException,
                           match="Attempting to set invalid trace setting :trace file name is not given"):
            c.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
        assert c.get_trace_settings() == OFF
        c.close()


def test_count_limited_traces_with_every_stage(tmp_path):
    f = str(tmp_path / "trace.json")
    with serve(tmp_path, f"triton,file={f}", "level=TIMESTAMPS", "rate=1", "count=3") as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        assert c.get_trace_settings() == {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "3",
                                          "log_frequency": "0", "trace_file": f, "trace_mode": "triton"}
        for i in range(5):
            infer(c, f"req-{i}")
        # count reached 0 and every trace taken is collected: written to trace.json.0 at once
        got = traces(wait_file(f + ".0"))
        assert [t["request_id"] for t in got.values()] == ["req-0", "req-1", "req-2"]
        for t in got.values():
            assert (t["model_name"], t["model_version"]) == ("identity_fp32", 1)
            check_stages(t)
        assert c.get_trace_settings()["trace_count"] == "0"
        # requests after the count are not traced: nothing more is written, even at exit
        c.close()
    assert sorted(glob.glob(f + "*")) == [f + ".0"]


def test_rate_samples_every_nth_request_and_log_frequency_rotates(tmp_path):
    f = str(tmp_path / "trace.json")
    with serve(tmp_path, f"triton,file={f}", "level=TIMESTAMPS", "rate=2", "triton,log-frequency=2") as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        for i in range(1, 11):
            infer(c, f"r{i}")
        # every 2nd request traced (r2, r4, ...), written 2 traces per file
        t0 = traces(wait_file(f + ".0"))
        t1 = traces(wait_file(f + ".1"))
        assert [t["request_id"] for t in t0.values()] == ["r2", "r4"]
        assert [t["request_id"] for t in t1.values()] == ["r6", "r8"]
        # the 5th trace (r10) is pending until the setting ends; a settings update starts a
        # new generation (Triton: sampling restarts), and the old one writes what it holds
        c.update_trace_settings(settings={"trace_rate": "1"})
        t2 = traces(wait_file(f + ".2"))
        assert [t["request_id"] for t in t2.values()] == ["r10"]
        infer(c, "after")
        c.close()
    # at shutdown the pending trace ("after") goes to the next index file
    t3 = traces(wait_file(f + ".3"))
    assert [t["request_id"] for t in t3.values()] == ["after"]
    for t in list(t0.values()) + list(t3.values()):
        check_stages(t)


def test_log_frequency_zero_appends_to_the_file_closed_at_shutdown(tmp_path):
    f = str(tmp_path / "trace.json")
    with serve(tmp_path, f"triton,file={f}", "level=TIMESTAMPS", "rate=1") as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        for i in range(3):
            infer(c, f"z{i}")
        c.close()
    got = traces(wait_file(f))
    assert [t["request_id"] for t in got.values()] == ["z0", "z1", "z2"]
    for t in got.values():
        check_stages(t)


def test_model_setting_overrides_the_global_one(tmp_path):
    f = str(tmp_path / "trace.json")
    with serve(tmp_path, f"triton,file={f}", "rate=1", models=("identity_fp32", "identity_int32")) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        got = c.update_trace_settings(model_name="identity_fp32",
                                      settings={"trace_level": ["TIMESTAMPS"], "trace_count": "2"})
        assert got["trace_level"] == ["TIMESTAMPS"] and got["trace_count"] == "2" and got["trace_rate"] == "1"
        assert c.get_trace_settings()["trace_level"] == ["OFF"]  # the global one is untouched
        assert c.get_trace_settings(model_name="identity_int32")["trace_level"] == ["OFF"]
        x = np.array([[7, 8]], np.int32)
        inp = httpclient.InferInput("INPUT0", [1, 2], "INT32")
        inp.set_data_from_numpy(x)
        c.infer("identity_int32", [inp], request_id="int32-untraced")
        infer(c, "fp32-a")
        infer(c, "fp32-b")
        got = traces(wait_file(f + ".0"))
        assert [(t["model_name"], t["request_id"]) for t in got.values()] == \
            [("identity_fp32", "fp32-a"), ("identity_fp32", "fp32-b")]
        # a model field not given follows the global setting: rate from the global update
        c.update_trace_settings(settings={"trace_rate": "5"})
        assert c.get_trace_settings(model_name="identity_fp32")["trace_rate"] == "5"
        # null clears the model's own values: back to the global setting
        cleared = c.update_trace_settings(model_name="identity_fp32",
                                          settings={"trace_level": None, "trace_count": None})
        assert cleared == c.get_trace_settings()
        c.close()


def test_tensors_level(tmp_path):
    f = str(tmp_path / "trace.json")
    with serve(tmp_path, f"triton,file={f}", "level=TENSORS", "rate=1", "count=2",
               models=("identity_fp32", "identity_string")) as s:
        s.wait_ready()
        c = httpclient.InferenceServerClient(s.hostport)
        infer(c, "t-fp32", data=(1.5, -2.0, 3.0))
        inp = httpclient.InferInput("INPUT0", [1, 2], "BYTES")
        inp.set_data_from_numpy(np.array([[b"ab", b"c\"d"]], dtype=object))
        c.infer("identity_string", [inp], request_id="t-str")
        got = traces(wait_file(f + ".0"))
        by = {t["request_id"]: t for t in got.values()}
        assert by["t-fp32"]["ts"] == {}  # TENSORS only: no timestamps
        assert by["t-fp32"]["tensors"] == [
            ("TENSOR_QUEUE_INPUT", {"name": "INPUT0", "data": "1.5,-2,3", "shape": "1,3", "dtype": "FP32"}),
            ("TENSOR_BACKEND_OUTPUT", {"name": "OUTPUT0", "data": "1.5,-2,3", "shape": "1,3", "dtype": "FP32"})]
        # BYTES elements each in quotes, as Triton writes them (their contents as they are;
        # the file stays valid JSON where Triton's would not for a quote in an element)
        assert by["t-str"]["tensors"][0] == \
            ("TENSOR_QUEUE_INPUT", {"name": "INPUT0", "data": '"ab","c"d"', "shape": "1,2", "dtype": "BYTES"})
        c.close()


@pytest.mark.parametrize("body,status,text", [
    ({"trace_level": ["BOGUS"]}, 400, "unknown trace level 'BOGUS'"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": "TIMESTAMPS"}, 400, "'trace_level' must be an array"),
    ({"trace_rate": "-1"}, 400, "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -1"),
    ({"trace_rate": "abc"}, 400, "Unable to parse 'trace_rate', got: abc"),
    ({"trace_count": "-2"}, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
    ({"log_frequency": "1.5"}, 400, "Unable to parse 'log_frequency', got: 1.5"),
    ({"trace_level": ["TIMESTAMPS"], "trace_rate": "0"}, 400,
     "Attempting to set invalid trace setting :sample rate must be non-zero"),
    ({"trace_file": "/tmp/elsewhere.json"}, 501, "trace file location can not be updated through network protocol"),
    ({"trace_sampling": "1"}, 400, "unknown trace setting 'trace_sampling'"),
])
def test_bad_settings_are_refused_and_change_nothing(tmp_path, body, status, text):
    f = str(tmp_path / "trace.json")
    with serve(tmp_path, f"triton,file={f}") as s:
        s.wait_ready()
        before = httpclient.InferenceServerClient(s.hostport).get_trace_settings()
        for path in ("/v2/trace/setting", "/v2/models/identity_fp32/trace/setting"):
            code, got = post(s.url, path, body)
            assert code == status and text in got["error"], got
        c = httpclient.InferenceServerClient(s.hostport)
        assert c.get_trace_settings() == before
        assert c.get_trace_settings(model_name="identity_fp32") == before
        # unknown model: Triton's text
        with pytest.raises(InferenceServerException, match="Request for unknown model : nope"):
            c.get_trace_settings(model_name="nope")
        c.close()


@pytest.mark.parametrize("flag,text", [
    ("level=LOUD", "level is OFF, TIMESTAMPS or TENSORS"),
    ("rate=0", "not a valid number"),
    ("count=-5", "not a valid number"),
    ("opentelemetry,url=x", "opentelemetry is not supported"),
    ("colour=blue", "unknown setting"),
    ("level=TIMESTAMPS", "needs triton,file=PATH"),
])
def test_bad_trace_config_flag_is_a_cli_error(flag, text):
    r = subprocess.run([BIN, "serve", "--model-repository", EXAMPLES, "--trace-config", flag],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert text in r.stderr and "--trace-config" in r.stderr
