"""The model parameter cinfer.max_inflight (docs/config-reference.md, cinfer extensions): a
bound on the requests a model has admitted and not yet finished, wherever they are. An LLM request leaves the
server's queue as soon as the engine takes it, so max_queue_size cannot bound its work;
cinfer.max_inflight does. With the openai client against the real binary serving smollm2:

- past the limit a request is refused at once with 503 and Retry-After (on /v1 and on the
  KServe generate extension alike), while the admitted ones run inside the engine (the
  server queue is empty) and all complete;
- the refusals are counted in cinfer_rejected_total{reason="max_inflight"};
- a finished request frees its place (a cancelled stream too);
- a value that is not a count fails the load naming the parameter.
"""
import concurrent.futures
import http.client
import json
import urllib.error
import urllib.request

import openai
import pytest

from cinfer_server import Server
from test_gateway_common import wait_for
from test_llm_admission import MODEL, client_of, load_failure, metric, repo_with, wait_metric


def rejected(server, reason):
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith("cinfer_rejected_total{") and f'model="{MODEL}"' in line and f'reason="{reason}"' in line:
            return float(line.split()[-1])
    return None


def pending(server):
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith("cinfer_pending_requests{") and f'model="{MODEL}"' in line:
            return float(line.split()[-1])
    return None


def stream_open(server, prompt, n):
    """A streamed completion sent directly; returns the connection once its first event came."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    c.request("POST", "/v1/completions", body=json.dumps(
        {"model": MODEL, "prompt": prompt, "max_tokens": n, "ignore_eos": True, "stream": True}),
        headers={"Content-Type": "application/json"})
    resp = c.getresponse()
    assert resp.status == 200
    resp.readline()
    return c, resp


def test_max_inflight_refuses_past_the_limit_and_admitted_requests_complete():
    # the engine itself would take 8 running and any number waiting: only max_inflight refuses
    with Server(repo_with({"cinfer.max_inflight": "2", "max_seqs": "8", "max_waiting": "0"})) as s:
        s.wait_ready()
        c = client_of(s)
        assert rejected(s, "max_inflight") == 0

        def gen(n, prompt):
            return c.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0,
                                        extra_body={"ignore_eos": True})

        pool = concurrent.futures.ThreadPoolExecutor(2)
        long_tokens = 300
        running = [pool.submit(gen, long_tokens, f"Once upon a time {i}") for i in range(2)]
        wait_metric(s, "cinfer_llm_running_sequences", lambda v: v == 2)
        # both left the server's queue: max_queue_size would bound nothing here
        assert pending(s) == 0
        for i in range(3):
            with pytest.raises(openai.APIStatusError) as ei:
                gen(4, f"One more {i}")
            e = ei.value
            assert e.status_code == 503, e
            assert e.response.headers.get("retry-after") == "1"
            assert "cinfer.max_inflight 2" in e.message, e.message
        # the KServe generate extension is refused the same way, with Retry-After too
        req = urllib.request.Request(s.url + f"/v2/models/{MODEL}/generate", method="POST",
                                     data=json.dumps({"text_input": "Hi", "parameters": {"max_tokens": 2}}).encode(),
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as hi:
            urllib.request.urlopen(req, timeout=120)
        assert hi.value.code == 503
        assert hi.value.headers.get("Retry-After") == "1"
        assert "cinfer.max_inflight 2" in json.loads(hi.value.read())["error"]
        assert not all(f.done() for f in running)
        for f in running:
            r = f.result(600)
            assert r.usage.completion_tokens == long_tokens and r.choices[0].finish_reason == "length"
        assert rejected(s, "max_inflight") == 4
        # the engine refused nothing itself
        assert metric(s, "cinfer_llm_refused_waiting_total") == 0
        # finished requests freed their places
        r = gen(4, "After")
        assert r.usage.completion_tokens == 4
        # a cancelled stream frees its place too
        conns = [stream_open(s, f"Count to a million {i}:", 2000) for i in range(2)]
        with pytest.raises(openai.APIStatusError) as ei:
            gen(4, "Refused")
        assert ei.value.status_code == 503
        for conn, _ in conns:
            conn.close()
        wait_metric(s, "cinfer_llm_running_sequences", lambda v: v == 0)
        # the FINAL of a cancelled request may trail the engine's reading: wait on a bound

        def again():
            try:
                return gen(2, "Again")
            except openai.APIStatusError as e:
                assert e.status_code == 503 and "max_inflight" in e.message, e
                return None

        ok = wait_for(again, 120, "a place after the cancelled streams")
        assert ok.usage.completion_tokens == 2
        pool.shutdown()


@pytest.mark.parametrize("value", ["-1", "two", "99999999999", ""])
def test_bad_max_inflight_fails_the_load(value):
    reason = load_failure({"cinfer.max_inflight": value})
    assert "parameter 'cinfer.max_inflight'" in reason and "is not an integer" in reason, reason
