"""More replicas than the gateway used to consider per request (it capped its candidate
list at 512 while the table holds 4096, so replicas past the 512th got no traffic).

600 replica entries behind the real `cinfer gateway`: each has its own HTTP port on a cheap
fake upstream (gateway_fake_upstreams.py: health, model list, inference) and shares the gRPC
port of one real `cinfer serve`. With the round-robin balancer, consecutive requests visit
every usable replica in turn, so every one of the 600 must answer some of 1200 HTTP requests
and some of 1200 gRPC calls (the gateway names the replica in X-Cinfer-Upstream and in
cinfer_gateway_grpc_requests_total). No timing is asserted; waits are bounded polls."""
import http.client
import json
import re

import numpy as np
import pytest
import tritonclient.grpc as tg

from cinfer_server import Server
from gateway_fake_upstreams import FakeUpstreams
from test_gateway_common import INFER_ID, Gateway, wait_for

N = 600


@pytest.fixture(scope="module")
def cluster():
    with Server(args=["--model-control-mode", "explicit", "--load-model", "identity"]) as real:
        real.wait_ready()
        with FakeUpstreams(N, models=["identity"]) as fake:
            cfg = {"upstreams": {"static": [{"address": f"127.0.0.1:{p}", "grpc_port": real.grpc_port}
                                            for p in fake.ports],
                                 "models_interval_ms": 5000},
                   # checks of 600 replicas on one fake: generous, and one slow answer does
                   # not take a replica out while the requests run
                   "health": {"interval_ms": 5000, "timeout_ms": 5000, "healthy_threshold": 1,
                              "unhealthy_threshold": 3},
                   "balancer": "round_robin"}
            with Gateway(cfg, args=["--grpc-port", "0"]) as gw:
                def all_ready():
                    reps = gw.status()["replicas"]
                    return len(reps) == N and all(r["state"] == "healthy" and "identity" in r.get("models", [])
                                                  for r in reps)
                wait_for(all_ready, 120, f"{N} healthy replicas listing identity")
                yield gw, fake, real


def test_http_reaches_every_replica(cluster):
    gw, fake, _ = cluster
    seen = {}
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    body = json.dumps(INFER_ID).encode()
    for _ in range(2 * N):
        c.request("POST", "/v2/models/identity/infer", body=body)
        r = c.getresponse()
        data = r.read()
        assert r.status == 200, data
        up = r.getheader("X-Cinfer-Upstream")
        # the answer came from the fake port the gateway named
        assert json.loads(data)["outputs"][0]["data"] == [int(up.rsplit(":", 1)[1])]
        seen[up] = seen.get(up, 0) + 1
    c.close()
    want = {f"127.0.0.1:{p}" for p in fake.ports}
    missing = want - set(seen)
    assert not missing, f"{len(missing)} of {N} replicas got no request (first: {sorted(missing)[:3]})"
    # table order: the last replicas (past the 512th) answered too
    assert all(fake.hits.get(p, 0) > 0 for p in fake.ports[512:])


def test_grpc_reaches_every_replica(cluster):
    gw, fake, _ = cluster
    c = tg.InferenceServerClient(f"127.0.0.1:{gw.grpc_port}")
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    i = tg.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    for _ in range(2 * N):
        assert np.array_equal(c.infer("identity", [i]).as_numpy("OUTPUT0"), x)
    c.close()
    m = gw.metrics()
    got = set(re.findall(r'cinfer_gateway_grpc_requests_total\{upstream="([^"]+)",method="ModelInfer",code="0"\} [1-9]', m))
    want = {f"127.0.0.1:{p}" for p in fake.ports}
    missing = want - got
    assert not missing, f"{len(missing)} of {N} replicas got no gRPC call (first: {sorted(missing)[:3]})"
