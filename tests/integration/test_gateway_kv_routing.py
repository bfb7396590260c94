"""KV-aware routing (`cinfer gateway --balancer kv_aware`) in front of two real `cinfer serve`
replicas of the smollm2 LLM, with the openai client: a shared prompt prefix stays on one
replica; different prefixes spread; a replica whose /metrics show running sequences (load
the gateway did not send) gets no new requests while the other is idle. The decisions are
read from the answers' X-Cinfer-Upstream header and the gateway's own reading of the
replicas' metrics in /status.json: no timing is asserted."""
import http.client
import json

import openai
import pytest

from cinfer_server import Server
from test_gateway_common import Gateway, wait_for

LLM = "smollm2"


def system_prompt(k):
    return (f"[conversation family {k}] You are a terse assistant of the cinfer test suite. " * 6)[:400]


@pytest.fixture(scope="module")
def cluster():
    args = ["--model-control-mode", "explicit", "--load-model", LLM]
    with Server(args=args) as a, Server(args=args) as b:
        a.wait_ready()
        b.wait_ready()
        cfg = {"health": {"interval_ms": 100, "timeout_ms": 100, "healthy_threshold": 1,
                          "unhealthy_threshold": 2},
               "upstreams": {"models_interval_ms": 200, "static": [a.hostport, b.hostport]},
               "balancer": "kv_aware", "affinity": {"prefix_bytes": 256, "prefix_bonus": 2}}
        with Gateway(cfg) as gw:
            gw.wait_ready()
            wait_for(lambda: all(LLM in r["models"] and r.get("llm", {}).get(LLM) is not None
                                 for r in gw.status()["replicas"]), 30, "models and LLM metrics")
            yield gw, a, b


def chat(gw, sys_prompt, user):
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="none", max_retries=0)
    r = c.chat.completions.with_raw_response.create(
        model=LLM, max_tokens=1, temperature=0,
        messages=[{"role": "system", "content": sys_prompt}, {"role": "user", "content": user}])
    r.parse()
    return r.headers["x-cinfer-upstream"]


def llm_reading(gw, hostport):
    return gw.replica(hostport).get("llm", {}).get(LLM, {})


def test_same_prefix_same_replica_and_prefixes_spread(cluster):
    gw, a, b = cluster
    ups = {chat(gw, system_prompt(0), f"question {i}") for i in range(8)}
    assert len(ups) == 1, ups  # one conversation family: one replica (its KV prefix cache)
    first = {chat(gw, system_prompt(k), "hello") for k in range(1, 21)}
    assert first == {a.hostport, b.hostport}, first  # 20 families over both replicas
    # and each family keeps its replica
    again = {k: chat(gw, system_prompt(k), "again") for k in range(1, 6)}
    for k, up in again.items():
        assert chat(gw, system_prompt(k), "once more") == up


def test_a_replica_running_sequences_gets_no_new_requests(cluster):
    gw, a, b = cluster
    # load on replica a that does not pass through the gateway: four long generations (cost
    # >= 4 - prefix_bonus 2 = 2, above b's worst: one sequence of a previous call read late)
    conns = []
    try:
        for i in range(4):
            c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
            c.request("POST", "/v1/completions", body=json.dumps(
                {"model": LLM, "prompt": f"Count to a thousand, run {i}:", "max_tokens": 4000,
                 "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
            resp = c.getresponse()
            assert resp.status == 200
            resp.readline()  # the first event: the sequence runs
            conns.append((c, resp))
        wait_for(lambda: llm_reading(gw, a.hostport).get("running", 0) >= 4, 30,
                 "the gateway reads 4 running sequences on replica a")
        # every family goes to b now, including those whose prefix belongs to a
        got = [chat(gw, system_prompt(k), "while a is busy") for k in range(1, 13)]
        assert set(got) == {b.hostport}, got
    finally:
        for c, _ in conns:
            c.close()  # cancels the generations
    wait_for(lambda: llm_reading(gw, a.hostport).get("running", 1) == 0, 60, "replica a idle again")
    # idle again: families whose prefix belongs to a go back to it
    got = {chat(gw, system_prompt(k), "after") for k in range(1, 21)}
    assert got == {a.hostport, b.hostport}, got


def test_kv_aware_readings_in_status_and_config_errors(cluster):
    gw, a, _ = cluster
    r = llm_reading(gw, a.hostport)
    for k in ("running", "waiting", "pending", "kv_usage", "prefix_cache_queries", "prefix_cache_hits"):
        assert k in r, r
    assert r["prefix_cache_queries"] > 0  # the chats above were looked up in its prefix cache
    bad = Gateway({"upstreams": {"static": [a.hostport]}, "balancer": "kv"})
    with pytest.raises(RuntimeError) as e:
        bad.start()
    assert "balancer" in str(e.value) and "kv_aware" in str(e.value)
