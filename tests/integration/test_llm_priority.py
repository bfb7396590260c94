"""Engine-level priorities through /v1 with the openai client against the real binary serving
smollm2 (docs/llm.md#admission): the request field `priority` (1 the highest level, larger
lower, 0 or absent the model's default) orders the engine's waiting queue. With max_seqs 1 the
engine runs one sequence at a time, so the order in which the queued requests finish is the
order in which the engine admitted them: a high-priority request submitted while the engine
is full, after two low-priority ones, is served before them. Waits are on the engine's gauges,
never on time."""
import concurrent.futures
import http.client
import json
import threading

import openai

from cinfer_server import Server
from test_llm_admission import MODEL, client_of, repo_with, wait_metric


def test_high_priority_request_starts_before_earlier_low_priority_ones():
    with Server(repo_with({"max_seqs": "1", "max_waiting": "0"})) as s:
        s.wait_ready()
        c = client_of(s)
        # the blocker: a long stream read only up to its first event, cancelled by closing it
        blocker = http.client.HTTPConnection("127.0.0.1", s.port, timeout=600)
        blocker.request("POST", "/v1/completions", body=json.dumps(
            {"model": MODEL, "prompt": "Count to a million:", "max_tokens": 2000, "ignore_eos": True,
             "stream": True}), headers={"Content-Type": "application/json"})
        resp = blocker.getresponse()
        assert resp.status == 200
        resp.readline()
        wait_metric(s, "cinfer_llm_running_sequences", lambda v: v == 1)

        done, lock = [], threading.Lock()

        def gen(name, priority):
            kw = {"extra_body": {"ignore_eos": True}}
            if priority is not None:
                kw["extra_body"]["priority"] = priority
            r = c.completions.create(model=MODEL, prompt=f"Request {name}:", max_tokens=4, temperature=0, **kw)
            with lock:
                done.append(name)
            return r

        pool = concurrent.futures.ThreadPoolExecutor(4)
        futs = [pool.submit(gen, "low1", 3)]
        wait_metric(s, "cinfer_llm_waiting_sequences", lambda v: v == 1)
        futs.append(pool.submit(gen, "default", None))  # the default level: 1, the highest
        wait_metric(s, "cinfer_llm_waiting_sequences", lambda v: v == 2)
        futs.append(pool.submit(gen, "low2", 3))
        wait_metric(s, "cinfer_llm_waiting_sequences", lambda v: v == 3)
        futs.append(pool.submit(gen, "high", 1))
        wait_metric(s, "cinfer_llm_waiting_sequences", lambda v: v == 4)
        assert done == []
        blocker.close()  # cancels the blocker: the engine admits the waiting ones, one at a time
        for f in futs:
            r = f.result(600)
            assert r.usage.completion_tokens == 4
        pool.shutdown()
        # level 1 (default, then high, by arrival) before level 3 (low1, then low2)
        assert done == ["default", "high", "low1", "low2"], done


def test_priority_out_of_range_is_a_400():
    with Server(repo_with({})) as s:
        s.wait_ready()
        c = client_of(s)
        try:
            c.completions.create(model=MODEL, prompt="x", max_tokens=1, extra_body={"priority": -1})
        except openai.BadRequestError as e:
            assert "priority" in e.message, e.message
        else:
            raise AssertionError("priority -1 was accepted")
