"""Model names longer than the gateway's old fixed buffer (char model[128]), through the real
`cinfer gateway`: a 200-character name is routed by its whole name over HTTP (tritonclient
HTTP and raw requests) and gRPC (tritonclient.grpc), and gets its KV reading for kv_aware.

Replica a serves the long-named copy of identity, replica b only plain identity, so a
request routed without its model (the old HTTP behaviour) would reach b half of the time
and get 404; the old gRPC path refused the name outright, and the old model discovery and
/metrics reading skipped names of 128 bytes or more."""
import http.client
import json
import os
import shutil
import tempfile

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th

from cinfer_server import EXAMPLES, Server
from gateway_fake_upstreams import FakeUpstreams
from test_gateway_common import Gateway, wait_for

LONG = "identity_" + "x" * 180 + "_long_model"  # 200 characters
assert len(LONG) == 200


def long_repo():
    d = tempfile.mkdtemp(prefix="cinfer-gw-long-")
    dst = os.path.join(d, LONG)
    shutil.copytree(os.path.join(EXAMPLES, "identity"), dst)
    p = os.path.join(dst, "config.pbtxt")
    text = open(p).read().replace('name: "identity"', f'name: "{LONG}"')
    with open(p, "w") as f:
        f.write(text)
    return d


@pytest.fixture(scope="module")
def cluster():
    repo = long_repo()
    try:
        with Server(repo) as a, Server(args=["--model-control-mode", "explicit", "--load-model", "identity"]) as b:
            a.wait_ready()
            b.wait_ready()
            args = ["--grpc-port", "0", "--health-interval-ms", "200", "--health-timeout-ms", "200"]
            for r in (a, b):
                args += ["--upstream", f"127.0.0.1:{r.port},grpc={r.grpc_port}"]
            with Gateway({}, args=args) as gw:
                wait_for(lambda: any(LONG in r.get("models", []) and r["state"] == "healthy"
                                     for r in gw.status()["replicas"]), 30, "the long name discovered")
                wait_for(lambda: any("identity" in r.get("models", []) and r["state"] == "healthy"
                                     for r in gw.status()["replicas"]), 30, "identity discovered")
                yield gw, a, b
    finally:
        shutil.rmtree(repo, ignore_errors=True)


def test_http_routes_by_the_whole_name(cluster):
    gw, a, _ = cluster
    body = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3],
                                   "data": [1.0, 2.0, 3.0]}]}).encode()
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    for _ in range(20):
        c.request("POST", f"/v2/models/{LONG}/infer", body=body)
        r = c.getresponse()
        data = json.loads(r.read())
        assert r.status == 200, data
        assert r.getheader("X-Cinfer-Upstream") == a.hostport
        assert data["model_name"] == LONG and data["outputs"][0]["data"] == [1.0, 2.0, 3.0]
    # and by the whole name with its version (the replica lists NAME@1)
    c.request("POST", f"/v2/models/{LONG}/versions/1/infer", body=body)
    r = c.getresponse()
    data = json.loads(r.read())
    assert r.status == 200 and r.getheader("X-Cinfer-Upstream") == a.hostport, data
    c.request("POST", f"/v2/models/{LONG}/versions/2/infer", body=body)
    r = c.getresponse()
    err = json.loads(r.read())["error"]
    assert r.status == 404 and LONG in err, err
    c.close()
    cl = th.InferenceServerClient(f"127.0.0.1:{gw.port}")
    assert cl.is_model_ready(LONG)
    x = np.array([[4.0, 5.0]], dtype=np.float32)
    i = th.InferInput("INPUT0", [1, 2], "FP32")
    i.set_data_from_numpy(x)
    assert np.array_equal(cl.infer(LONG, [i]).as_numpy("OUTPUT0"), x)
    # the answers are counted under the whole name
    assert f'model="{LONG}"' in gw.metrics()
    # a name no replica serves, one byte longer: 404 naming it whole
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    c.request("POST", f"/v2/models/{LONG}y/infer", body=body)
    r = c.getresponse()
    err = json.loads(r.read())["error"]
    assert r.status == 404 and f"'{LONG}y'" in err, err
    c.close()


def test_a_path_the_replicas_refuse_is_a_400_at_the_gateway(cluster):
    """A segment longer than any model name (256 bytes: CINFER_MODEL_NAME_MAX is 255), or a
    NUL byte, is the replica's 400 with its reason, answered by the gateway itself; it was a
    403 'not a known API route ... operator credential'."""
    gw, a, _ = cluster
    for path, want in ((f"/v2/models/{'n' * 256}/infer", "request path segment of 256 bytes is longer "
                        "than the limit of 255 bytes"),
                       ("/v2/models/iden%00tity/infer", "NUL")):
        for port in (gw.port, a.port):  # the gateway and a replica answer alike
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("POST", path, body=b"{}")
            r = c.getresponse()
            err = json.loads(r.read())["error"]
            assert r.status == 400 and want in err, (port, r.status, err)
            c.close()
    # and the gateway still routes the 200-character name afterwards
    cl = th.InferenceServerClient(f"127.0.0.1:{gw.port}")
    assert cl.is_model_ready(LONG)


def test_grpc_routes_by_the_whole_name(cluster):
    gw, _, _ = cluster
    c = tg.InferenceServerClient(f"127.0.0.1:{gw.grpc_port}")
    assert c.is_model_ready(LONG)
    for k in range(10):
        x = np.full((1, 3), k, dtype=np.float32)
        i = tg.InferInput("INPUT0", [1, 3], "FP32")
        i.set_data_from_numpy(x)
        r = c.infer(LONG, [i])
        assert r.get_response().model_name == LONG
        assert np.array_equal(r.as_numpy("OUTPUT0"), x)
    r = c.infer(LONG, [i], model_version="1")
    assert r.get_response().model_name == LONG and np.array_equal(r.as_numpy("OUTPUT0"), x)
    with pytest.raises(Exception) as e:
        c.infer(LONG + "y", [i])
    assert "NOT_FOUND" in str(e.value.status()) and LONG + "y" in e.value.message()
    c.close()


def test_kv_reading_of_a_long_name():
    metrics = (f'cinfer_llm_running_sequences{{model="{LONG}"}} 3\n'
               f'cinfer_llm_waiting_sequences{{model="{LONG}"}} 2\n'
               f'cinfer_llm_kv_cache_usage_ratio{{model="{LONG}"}} 0.5\n')
    with FakeUpstreams(1, models=[LONG], metrics=metrics) as fake:
        cfg = {"upstreams": {"static": [f"127.0.0.1:{fake.ports[0]}"], "models_interval_ms": 200},
               "health": {"interval_ms": 200, "timeout_ms": 200, "healthy_threshold": 1},
               "balancer": "kv_aware"}
        with Gateway(cfg) as gw:
            def reading():
                r = gw.status()["replicas"][0]
                return LONG in r.get("models", []) and r.get("llm", {}).get(LONG)
            got = wait_for(reading, 30, "the KV reading of the long-named model")
            assert got["running"] == 3 and got["waiting"] == 2 and got["kv_usage"] == 0.5
