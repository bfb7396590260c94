"""TraceSetting and LogSettings over gRPC against the real binary, with tritonclient.grpc:
the same settings, rules and texts as /v2/trace/setting and /v2/logging (one
implementation, frontend/settings.c), and the same effect: a change made over gRPC is what
HTTP reads back, and it changes what the running server does (traces written, request lines
logged)."""
import glob
import json
import os
import time

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    return str(tmp_path_factory.mktemp("trace") / "trace.json")


@pytest.fixture(scope="module")
def server(trace_file):
    repo = copy_repo(["identity_fp32", "identity_int32"])
    with Server(repo, ["--io-threads", "1", "--trace-config", f"triton,file={trace_file}"]) as s:
        s.wait_ready()
        s.grpc_url = f"127.0.0.1:{s.grpc_port}"
        s.g = tg.InferenceServerClient(s.grpc_url)
        s.h = th.InferenceServerClient(s.hostport)
        yield s
        s.g.close()
        s.h.close()


def grpc_trace(c, **kw):
    """The TraceSettingResponse as the HTTP endpoint's JSON ({key: str or [str]})."""
    out = {}
    for k, v in c.get_trace_settings(as_json=True, **kw)["settings"].items():
        vals = v.get("value", [])
        out[k] = vals if k == "trace_level" else (vals[0] if vals else "")
    return out


def grpc_error(fn):
    with pytest.raises(InferenceServerException) as e:
        fn()
    return e.value.status(), e.value.message()


def infer_http(h, rid):
    x = np.ones((1, 3), np.float32)
    i = th.InferInput("INPUT0", [1, 3], "FP32")
    i.set_data_from_numpy(x)
    h.infer("identity_fp32", [i], request_id=rid)


def wait_for(pred, what, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(what)


def test_trace_settings_read_the_same_over_grpc_and_http(server, trace_file):
    assert grpc_trace(server.g) == server.h.get_trace_settings()
    assert grpc_trace(server.g, model_name="identity_fp32") == \
        server.h.get_trace_settings(model_name="identity_fp32")
    assert grpc_trace(server.g)["trace_file"] == trace_file
    md = server.g.get_server_metadata(as_json=True)
    assert "trace" in md["extensions"] and "logging" in md["extensions"]


def test_trace_update_over_grpc_takes_effect(server, trace_file):
    g, h = server.g, server.h
    r = g.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                          "trace_count": "2", "log_frequency": "2"}, as_json=True)
    assert r["settings"]["trace_level"]["value"] == ["TIMESTAMPS"]
    want = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "2",
            "log_frequency": "2", "trace_file": trace_file, "trace_mode": "triton"}
    assert h.get_trace_settings() == want and grpc_trace(g) == want
    infer_http(h, "traced-1")
    infer_http(h, "traced-2")
    # two traces with log_frequency 2: written to trace.json.0 at once
    path = trace_file + ".0"
    entries = wait_for(lambda: os.path.exists(path) and _load(path), f"{path} never appeared: "
                       f"{sorted(glob.glob(trace_file + '*'))}")
    ids = [e.get("request_id") for e in entries if "model_name" in e]
    assert ids == ["traced-1", "traced-2"]
    assert grpc_trace(g)["trace_count"] == "0"
    # a value list left empty clears the setting back to the start-up value, as HTTP's null
    g.update_trace_settings(settings={"trace_level": [], "trace_count": [], "trace_rate": [],
                                      "log_frequency": []})
    assert h.get_trace_settings()["trace_level"] == ["OFF"]
    assert h.get_trace_settings()["trace_rate"] == "1000"


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError:
        return None  # still being written


def test_model_trace_setting_over_grpc(server):
    g, h = server.g, server.h
    g.update_trace_settings(model_name="identity_int32", settings={"trace_rate": "7"})
    assert h.get_trace_settings(model_name="identity_int32")["trace_rate"] == "7"
    assert h.get_trace_settings()["trace_rate"] != "7"
    g.update_trace_settings(model_name="identity_int32", settings={"trace_rate": []})
    assert h.get_trace_settings(model_name="identity_int32")["trace_rate"] == \
        h.get_trace_settings()["trace_rate"]
    code, msg = grpc_error(lambda: g.get_trace_settings(model_name="nope"))
    assert code == "StatusCode.INVALID_ARGUMENT" and msg == "Request for unknown model : nope"


@pytest.mark.parametrize("settings,code,text", [
    ({"trace_file": "/tmp/x"}, "StatusCode.UNIMPLEMENTED",
     "trace file location can not be updated through network protocol"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, "StatusCode.INVALID_ARGUMENT",
     "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": ["LOUD"]}, "StatusCode.INVALID_ARGUMENT", "unknown trace level 'LOUD'"),
    ({"trace_rate": "fast"}, "StatusCode.INVALID_ARGUMENT", "Unable to parse 'trace_rate', got: fast"),
    ({"trace_count": "-2"}, "StatusCode.INVALID_ARGUMENT",
     "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
    ({"trace_rate": ["1", "2"]}, "StatusCode.INVALID_ARGUMENT", "expect only 1 value for 'trace_rate'"),
    ({"colour": "blue"}, "StatusCode.INVALID_ARGUMENT", "unknown trace setting 'colour'"),
])
def test_bad_trace_settings_are_refused_and_change_nothing(server, settings, code, text):
    before = server.h.get_trace_settings()
    got_code, msg = grpc_error(lambda: server.g.update_trace_settings(settings=settings))
    assert got_code == code and text in msg, (got_code, msg)
    if "expect only 1" not in text:  # an encoding rule of gRPC; the rest are HTTP's own texts
        with pytest.raises(InferenceServerException) as e:
            server.h.update_trace_settings(settings=settings)
        assert text in e.value.message()
    assert server.h.get_trace_settings() == before


def test_log_settings_over_grpc_take_effect(server):
    g, h = server.g, server.h
    want = h.get_log_settings()
    got = g.get_log_settings(as_json=True)["settings"]
    flat = {k: next(iter(v.values())) if v else None for k, v in got.items()}
    # protobuf's JSON form drops default values (false, 0, ""): compare what is present
    for k, v in want.items():
        assert flat.get(k, type(v)()) == v, (k, flat, want)
    r = g.update_log_settings({"log_verbose_level": 1}, as_json=True)
    assert int(r["settings"]["log_verbose_level"]["uint32_param"]) == 1
    assert h.get_log_settings()["log_verbose_level"] == 1
    infer_http(h, "verbose-after-grpc")
    wait_for(lambda: any("request_id=verbose-after-grpc" in l for l in server.log),
             "no request line after log_verbose_level=1 over gRPC")
    g.update_log_settings({"log_verbose_level": 0, "log_info": False})
    assert h.get_log_settings()["log_info"] is False
    g.update_log_settings({"log_info": True, "log_format": "json"})
    assert h.get_log_settings()["log_format"] == "json"
    g.update_log_settings({"log_format": "default"})
    assert h.get_log_settings() == want


@pytest.mark.parametrize("settings,code,text", [
    ({"log_file": "/tmp/x"}, "StatusCode.UNIMPLEMENTED",
     "log file location can not be updated through network protocol"),
    ({"log_format": "xml"}, "StatusCode.INVALID_ARGUMENT", "invalid argument for --log_format, got: xml"),
    ({"log_colour": True}, "StatusCode.INVALID_ARGUMENT", "unknown logging setting 'log_colour'"),
])
def test_bad_log_settings_are_refused_and_change_nothing(server, settings, code, text):
    before = server.h.get_log_settings()
    got_code, msg = grpc_error(lambda: server.g.update_log_settings(settings))
    assert got_code == code and text in msg, (got_code, msg)
    with pytest.raises(InferenceServerException) as e:
        server.h.update_log_settings(settings)
    assert text in e.value.message()
    assert server.h.get_log_settings() == before


def test_log_setting_of_the_wrong_type(server):
    """What tritonclient never sends: a string for a boolean setting (a raw stub)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    ch = grpc.insecure_channel(server.grpc_url)
    req = service_pb2.LogSettingsRequest()
    req.settings["log_info"].string_param = "yes"
    with pytest.raises(grpc.RpcError) as e:
        service_pb2_grpc.GRPCInferenceServiceStub(ch).LogSettings(req)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "'log_info' must be a boolean"
    ch.close()
