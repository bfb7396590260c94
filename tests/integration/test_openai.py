"""OpenAI-compatible API with the official `openai` client against the real binary serving
SmolLM2-135M-Instruct (Q4_1 GGUF) through the LLM engine."""
import http.client
import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request

import openai
import pytest

from cinfer_server import Server, copy_repo

MODEL = "smollm2"


@pytest.fixture(scope="module")
def server():
    repo = copy_repo([MODEL])
    with Server(repo) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def metric(server, name):
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{MODEL}"}}'):
            return float(line.split()[-1])
    return None


def test_models(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL]


def llama_cpp_golden(name):
    """Greedy output of llama.cpp for a fixture prompt (tests/data/llm, made with llama-cpp-python)."""
    path = os.path.join(os.environ.get("CINFER_SOURCE_DIR", "."), "tests", "data", "llm", "greedy_smollm2.json")
    with open(path) as f:
        return next(c for c in json.load(f)["cases"] if c["name"] == name)


def test_chat_greedy_matches_llama_cpp(client):
    # The chat template renders SmolLM2's default system prompt, exactly the prompt of the
    # llama.cpp fixture chat_france; greedy decoding must give llama.cpp's text.
    golden = llama_cpp_golden("chat_france")
    r = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=24,
                                       messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    text = r.choices[0].message.content
    assert len(text) > 20 and golden["output_text"].startswith(text), (text, golden["output_text"])
    assert r.usage.prompt_tokens == len(golden["prompt_ids"])
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5
    assert r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_matches_whole(client):
    msgs = [{"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Name three colors."}]
    whole = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=20, messages=msgs)
    pieces, finish, roles = [], None, []
    stream = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=20, messages=msgs,
                                            stream=True, stream_options={"include_usage": True})
    usage = None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            if ch.delta.content:
                pieces.append(ch.delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
    assert roles == ["assistant"]
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert len(pieces) > 3  # really streamed piece by piece


def test_completions_stream_and_max_tokens(client):
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=0)
    assert r.usage.completion_tokens == 5
    assert r.choices[0].finish_reason == "length"
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=5, temperature=0, stream=True))
    assert text == r.choices[0].text


def test_ignore_eos_generates_exactly_max_tokens(client):
    # The serving benchmark (bench/llm/bench_serving_vs_llamacpp.py) relies on ignore_eos
    # (vLLM's and llama-server's name) so that every server generates the same token count.
    # A question the model answers briefly ends with the end-of-turn token well before 64...
    msgs = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    short = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=64, messages=msgs)
    assert short.choices[0].finish_reason == "stop"
    assert short.usage.completion_tokens < 64
    # ...and with ignore_eos it goes on to max_tokens, whole and streamed alike.
    whole = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=64, messages=msgs,
                                           extra_body={"ignore_eos": True})
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 64
    assert whole.choices[0].message.content.startswith(short.choices[0].message.content)
    usage, finish = None, None
    for chunk in client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=64,
                                           temperature=0, stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True}):
        usage = chunk.usage or usage
        finish = next((c.finish_reason for c in chunk.choices if c.finish_reason), finish)
    assert finish == "length" and usage.completion_tokens == 64


def test_stop_string(client):
    base = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0)
    full = base.choices[0].text
    assert " 6" in full, full
    r = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0,
                                  stop=[" 6"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == full[:full.index(" 6")]


def test_seed_reproducible_and_n(client):
    kw = dict(model=MODEL, prompt="The weather today is", max_tokens=12, temperature=1.0, top_p=0.95)
    a = client.completions.create(seed=1234, **kw).choices[0].text
    b = client.completions.create(seed=1234, **kw).choices[0].text
    assert a == b
    r = client.completions.create(seed=7, n=3, **kw)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert len({c.text for c in r.choices}) > 1  # different seeds per choice
    # usage counts every choice's tokens
    n_length = sum(c.finish_reason == "length" for c in r.choices)
    assert 12 * n_length + (3 - n_length) <= r.usage.completion_tokens <= 36


def test_logprobs(client):
    r = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=4, logprobs=True, top_logprobs=3,
                                       messages=[{"role": "user", "content": "Say hi"}])
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for tok in content:
        assert tok.logprob <= 0
        assert len(tok.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert abs(tok.top_logprobs[0].logprob - tok.logprob) < 1e-4


@pytest.mark.parametrize("kwargs,status,fragment", [
    (dict(max_tokens=0), 400, "max_tokens"),
    (dict(max_tokens=-5), 400, "max_tokens"),
    (dict(temperature=-1), 400, "temperature"),
    (dict(top_p=0), 400, "top_p"),
    (dict(n=100), 400, "'n'"),
    (dict(model="no-such-model"), 404, "does not exist"),
])
def test_bad_parameters(client, kwargs, status, fragment):
    args = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    args.update(kwargs)
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(**args)
    assert e.value.status_code == status
    assert fragment in e.value.response.json()["error"]["message"]


def test_prompt_longer_than_context(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="hello " * 5000, max_tokens=4)
    assert "maximum context length" in e.value.response.json()["error"]["message"]


def test_malformed_json_and_kserve_model(server):
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    c.request("POST", "/v1/chat/completions", body=b'{"model": ', headers={"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    assert r.status == 400 and "malformed JSON" in body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    c.close()


def test_tokenize_roundtrip(server):
    text = "Hello, world! Ünïcödé 🚀 and code: for (i = 0; i < n; i++)"
    req = urllib.request.Request(server.url + "/tokenize", data=json.dumps({"content": text}).encode(), method="POST")
    toks = json.load(urllib.request.urlopen(req))["tokens"]
    assert len(toks) > 5
    req = urllib.request.Request(server.url + "/detokenize", data=json.dumps({"tokens": toks}).encode(), method="POST")
    assert json.load(urllib.request.urlopen(req))["content"] == text
    assert json.load(urllib.request.urlopen(server.url + "/health"))["status"] == "ok"


def test_client_disconnect_cancels_sequence(server):
    body = json.dumps({"model": MODEL, "prompt": "Write a very long story about dragons.",
                       "max_tokens": 1500, "temperature": 0.8, "stream": True, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:  # a few tokens streamed: the sequence is running
        chunk = s.recv(4096)
        assert chunk
        got += chunk
    assert metric(server, "cinfer_llm_running_sequences") >= 1
    s.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and metric(server, "cinfer_llm_running_sequences") != 0:
        time.sleep(0.05)
    assert metric(server, "cinfer_llm_running_sequences") == 0
    assert metric(server, "cinfer_llm_waiting_sequences") == 0
    # its KV blocks are free (full blocks may stay in the prefix cache, which is not usage)
    assert metric(server, "cinfer_llm_kv_cache_usage_ratio") == 0
    # it stopped for good: a later request's tokens are the only ones generated after it
    # (one step thread: once retired, the cancelled sequence is never scheduled again)
    gen = metric(server, "cinfer_llm_generation_tokens_total")
    body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 2, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    assert json.load(urllib.request.urlopen(req, timeout=60))["usage"]["completion_tokens"] == 2
    assert metric(server, "cinfer_llm_generation_tokens_total") == gen + 2


def test_llm_metrics_exported(server, client):
    client.completions.create(model=MODEL, prompt="Hi", max_tokens=3, temperature=0)
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    for name in ("cinfer_llm_time_to_first_token_seconds_bucket", "cinfer_llm_inter_token_latency_seconds_count",
                 "cinfer_llm_e2e_request_seconds_sum", "cinfer_llm_kv_cache_usage_ratio",
                 "cinfer_llm_prompt_tokens_total", "cinfer_llm_generation_tokens_total",
                 "cinfer_llm_prefix_cache_hits_total", "cinfer_llm_preemptions_total"):
        assert name in text, name
    assert metric(server, "cinfer_llm_generation_tokens_total") >= 3


def model_stats(server):
    s = json.load(urllib.request.urlopen(server.url + f"/v2/models/{MODEL}/stats"))["model_stats"][0]
    return s["inference_stats"]["success"]["count"], s["inference_stats"]["fail"]["count"]


def wait_metric(server, name, pred, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = metric(server, name)
        if v is not None and pred(v):
            return v
        time.sleep(0.02)
    raise AssertionError(f"{name} never satisfied the condition (last {metric(server, name)})")


def test_openai_requests_are_counted_in_model_stats(server, client):
    # One request path: every OpenAI request is a cinfer_request, so the per-model statistics
    # count it like a KServe request (before, they stayed at 0).
    ok0, fail0 = model_stats(server)
    client.completions.create(model=MODEL, prompt="Hi", max_tokens=3, temperature=0)
    client.chat.completions.create(model=MODEL, max_tokens=3, temperature=0, n=2,
                                   messages=[{"role": "user", "content": "Hi"}])
    chunks = list(client.chat.completions.create(model=MODEL, max_tokens=3, temperature=0, stream=True,
                                                 messages=[{"role": "user", "content": "Hi"}]))
    assert chunks[-1].choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt="hello " * 5000, max_tokens=4)
    assert model_stats(server) == (ok0 + 3, fail0 + 1)


def test_kserve_text_input_uses_the_same_backend_path(server, client):
    # KServe's text_input -> text_output reaches the same backend code as /v1/completions:
    # greedy outputs agree, and the request is counted.
    prompt = "The capital of France is"
    want = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0).choices[0].text
    ok0, _ = model_stats(server)
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [prompt]}],
            "parameters": {"max_tokens": 8, "temperature": 0}}
    req = urllib.request.Request(server.url + f"/v2/models/{MODEL}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out = json.load(urllib.request.urlopen(req, timeout=60))["outputs"]
    assert [o["name"] for o in out] == ["text_output"]
    assert out[0]["data"] == [want]
    assert model_stats(server)[0] == ok0 + 1
    # a bad sampling value is the backend's clear 400, not a crash or a hang
    body["parameters"] = {"max_tokens": 0}
    req = urllib.request.Request(server.url + f"/v2/models/{MODEL}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=60)
    assert e.value.code == 400 and "max_tokens" in json.load(e.value)["error"]


def test_client_disconnect_before_a_whole_answer_cancels(server):
    # A non-streamed request whose client goes away while it generates: the request is
    # cancelled (counted as a failure), the sequence stops long before max_tokens.
    ok0, fail0 = model_stats(server)
    gen0 = metric(server, "cinfer_llm_generation_tokens_total") or 0
    body = json.dumps({"model": MODEL, "prompt": "Write a very long story about dragons.",
                       "max_tokens": 1500, "temperature": 0.8, "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    wait_metric(server, "cinfer_llm_running_sequences", lambda v: v >= 1)
    s.close()
    wait_metric(server, "cinfer_llm_running_sequences", lambda v: v == 0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and model_stats(server) != (ok0, fail0 + 1):
        time.sleep(0.02)
    assert model_stats(server) == (ok0, fail0 + 1)
    assert metric(server, "cinfer_llm_generation_tokens_total") - gen0 < 1500


def test_sigterm_drains_a_streamed_request():
    # SIGTERM while a stream is generating: the server stops taking requests but lets the
    # in-flight one finish (it is in the server's in-flight count), then exits 0.
    repo = copy_repo([MODEL])
    # a grace period no build (sanitizers included) comes near: the drain itself is tested
    with Server(repo, args=["--exit-timeout-secs", "600"]) as srv:
        srv.wait_ready()
        body = json.dumps({"model": MODEL, "prompt": "Count to a thousand:", "max_tokens": 300,
                           "temperature": 0, "ignore_eos": True, "stream": True,
                           "stream_options": {"include_usage": True}}).encode()
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 3:
            chunk = s.recv(4096)
            assert chunk
            got += chunk
        srv.proc.send_signal(signal.SIGTERM)
        while b"data: [DONE]" not in got:
            chunk = s.recv(65536)
            assert chunk, got[-500:]
            got += chunk
        s.close()
        usage = [json.loads(line[6:]) for line in got.decode().split("\n")
                 if line.startswith("data: {") and '"usage"' in line]
        assert usage and usage[-1]["usage"]["completion_tokens"] == 300
        assert srv.proc.wait(60) == 0


def test_kserve_client_disconnect_cancels_generation(server):
    # The KServe adapter of the llm backend used to ignore cancellation: a client that went
    # away kept its sequence generating to max_tokens. Now the request is cancelled.
    ok0, fail0 = model_stats(server)
    gen0 = metric(server, "cinfer_llm_generation_tokens_total") or 0
    body = json.dumps({"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1],
                                   "data": ["Write a very long story about dragons."]}],
                       "parameters": {"max_tokens": 1500, "temperature": 0.8, "ignore_eos": True}}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    wait_metric(server, "cinfer_llm_running_sequences", lambda v: v >= 1)
    s.close()
    wait_metric(server, "cinfer_llm_running_sequences", lambda v: v == 0)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and model_stats(server) != (ok0, fail0 + 1):
        time.sleep(0.02)
    assert model_stats(server) == (ok0, fail0 + 1)
    assert metric(server, "cinfer_llm_generation_tokens_total") - gen0 < 1500


def test_echo_logprobs_score_the_prompt(client):
    """Legacy completions with echo + logprobs (what lm-evaluation-harness sends for a
    log-likelihood): the prompt's tokens come back with their logprobs (the first null), then
    the generated one. The logprob the server gives a prompt token equals the one it gave
    the same token when it generated it."""
    prompt = "The capital of France is"
    gen = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0, logprobs=1)
    word = gen.choices[0].text
    lp_generated = gen.choices[0].logprobs.token_logprobs[0]
    assert word and lp_generated < 0
    r = client.completions.create(model=MODEL, prompt=prompt + word, max_tokens=1, temperature=0,
                                  logprobs=2, echo=True)
    ch = r.choices[0]
    lp = ch.logprobs
    n = r.usage.prompt_tokens + r.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert ch.text == "".join(lp.tokens) and ch.text.startswith(prompt + word)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert all(len(t) <= 2 for t in lp.top_logprobs[1:])
    last_prompt = r.usage.prompt_tokens - 1
    assert lp.tokens[last_prompt] == word, lp.tokens
    assert abs(lp.token_logprobs[last_prompt] - lp_generated) < 2e-3, (lp.token_logprobs, lp_generated)
    # the greedy choice at each prompt position is the best of its top_logprobs
    for i in range(1, last_prompt + 1):
        best = max(lp.top_logprobs[i].values())
        assert lp.token_logprobs[i] <= best + 1e-6
