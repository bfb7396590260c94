"""A replica's admission refusal (503 with Retry-After: its LLM engine is full, nothing was
done) through the real gateway in front of two real `cinfer serve` replicas of smollm2, with
the openai client (docs/gateway.md#retries-and-refusals):

- the gateway retries the refused request once on the other replica, so the user gets an
  answer, and counts the refusal in cinfer_gateway_upstream_refusals_total;
- the refusing replica is never ejected nor marked unhealthy for it, although the outlier
  setting ejects after a single failure;
- with retries off, the refusal reaches the client as 503 with its Retry-After.

Replica a is made full by two long generations sent to it directly (max_seqs 1, max_waiting 1:
one runs, one waits). No timing is asserted; waits are on conditions with bounds."""
import http.client
import json
import re

import openai
import pytest

from cinfer_server import Server
from test_gateway_common import Gateway, get, wait_for
from test_llm_admission import repo_with, wait_metric

LLM = "smollm2"


@pytest.fixture(scope="module")
def replicas():
    with Server(repo_with({"max_seqs": "1", "max_waiting": "1"})) as a, Server(repo_with({})) as b:
        a.wait_ready()
        b.wait_ready()
        yield a, b


def gateway_cfg(a, b, retries):
    return {"upstreams": {"static": [a.hostport, b.hostport], "models_interval_ms": 200},
            "health": {"interval_ms": 1000, "timeout_ms": 1000, "healthy_threshold": 1,
                       "unhealthy_threshold": 5},
            "balancer": "round_robin",
            # one failure ejects: a refusal counted as a failure would eject replica a
            "outlier": {"consecutive_failures": 1, "base_ejection_ms": 60000, "max_ejected_percent": 50},
            "retry": {"retries": retries, "budget_min": 50}}


def fill(a):
    """Two long streamed generations sent to replica a directly: one runs, one waits."""
    conns = []
    for i in range(2):
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
        c.request("POST", "/v1/completions", body=json.dumps(
            {"model": LLM, "prompt": f"Count to a million, run {i}:", "max_tokens": 1500,
             "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
        conns.append(c)
        if i == 0:  # the second one waits: its answer starts only when the first ends
            resp = c.getresponse()
            assert resp.status == 200
            resp.readline()  # the first event: it runs
    wait_metric(a, "cinfer_llm_waiting_sequences", lambda v: v == 1)
    wait_metric(a, "cinfer_llm_running_sequences", lambda v: v == 1)
    return conns


def gw_metric(gw, name, upstream):
    for line in gw.metrics().splitlines():
        m = re.match(r'%s\{upstream="%s"(?:,model="([^"]*)")?\} (\S+)' % (name, re.escape(upstream)), line)
        if m and (m.group(1) in (None, LLM)):
            return float(m.group(2))
    return 0.0


def client(gw):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{gw.port}/v1", api_key="none", max_retries=0,
                         timeout=600)


def ask(gw, i):
    r = client(gw).completions.with_raw_response.create(model=LLM, prompt=f"Question {i}:", max_tokens=2,
                                                        temperature=0)
    return r.headers["x-cinfer-upstream"], r.parse()


def ready(gw, a, b):
    wait_for(lambda: all(LLM in r["models"] and r["state"] == "healthy" for r in gw.status()["replicas"]),
             30, "both replicas healthy with the model")


def test_refusal_is_retried_on_the_other_replica_and_not_a_failure(replicas):
    a, b = replicas
    with Gateway(gateway_cfg(a, b, retries=1)) as gw:
        gw.wait_ready()
        ready(gw, a, b)
        conns = fill(a)
        try:
            refused_before = wait_metric(a, "cinfer_llm_refused_waiting_total", lambda v: True)
            # round robin sends every second request to a: each is refused there and answered by b
            for i in range(6):
                up, r = ask(gw, i)
                assert up == b.hostport
                assert r.usage.completion_tokens == 2
            refused = wait_metric(a, "cinfer_llm_refused_waiting_total", lambda v: v > refused_before)
            n = refused - refused_before
            assert n >= 1
            assert gw_metric(gw, "cinfer_gateway_upstream_refusals_total", a.hostport) == n
            assert gw_metric(gw, "cinfer_gateway_retries_total", a.hostport) == n
            assert gw_metric(gw, "cinfer_gateway_ejections_total", a.hostport) == 0
            assert gw.replica(a.hostport)["state"] == "healthy"
            assert gw_metric(gw, "cinfer_gateway_upstream_healthy", a.hostport) == 1
        finally:
            for c in conns:
                c.close()  # cancels the generations
        wait_metric(a, "cinfer_llm_running_sequences", lambda v: v == 0)
        wait_metric(a, "cinfer_llm_waiting_sequences", lambda v: v == 0)
        # a takes requests again: round robin reaches it within two requests
        ups = {ask(gw, 100 + i)[0] for i in range(4)}
        assert ups == {a.hostport, b.hostport}, ups


def test_refusal_passes_on_with_retry_after_when_retries_are_off(replicas):
    a, b = replicas
    with Gateway(gateway_cfg(a, b, retries=0)) as gw:
        gw.wait_ready()
        ready(gw, a, b)
        conns = fill(a)
        try:
            refusals = 0
            for i in range(6):
                try:
                    up, r = ask(gw, i)
                    assert up == b.hostport
                except openai.APIStatusError as e:
                    assert e.status_code == 503, e
                    assert e.response.headers.get("retry-after") == "1"
                    assert e.response.headers.get("x-cinfer-upstream") == a.hostport
                    assert "max_waiting 1" in e.message, e.message
                    refusals += 1
            assert refusals >= 2  # round robin: several reached a, none ejected it
            assert gw_metric(gw, "cinfer_gateway_upstream_refusals_total", a.hostport) == refusals
            assert gw_metric(gw, "cinfer_gateway_ejections_total", a.hostport) == 0
            assert gw.replica(a.hostport)["state"] == "healthy"
            # the gateway's own view of the answers: the 503s are counted as such
            code, _, body = get(gw.port, "/metrics")
            assert code == 200 and b'code="503"' in body
        finally:
            for c in conns:
                c.close()
        wait_metric(a, "cinfer_llm_running_sequences", lambda v: v == 0)
