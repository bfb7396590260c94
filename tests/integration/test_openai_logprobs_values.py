"""Logprobs values no real model gives on demand, through every OpenAI answer: a logprob of
-inf (a token the sampler could not pick) comes out as -9999, as vLLM writes it
(max(logprob, -9999.0)), and so does anything below; a token whose text is a NUL byte keeps
it (\\u0000). Whole and streamed, completions (with echo) and chat: the answer is strict JSON
(no NaN or Infinity), the openai package reads it, and whole and streamed agree. Before,
whole completions went through cJSON (-inf emptied the arrays, NUL cut the token) and chat
printed -inf as is (invalid JSON). The model is tests/integration/backends/lpscript.c, a
scripted backend: byte tokens, three generated tokens NUL, 'c', 'd'."""
import json
import os
import shutil
import tempfile
import urllib.request

import openai
import pytest

from cinfer_server import Server

MODEL = "lpscript"
CONFIG = """name: "lpscript"
backend: "lpscript"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "index" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "token_id" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "prompt_pos" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "rank" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "logprob" data_type: TYPE_FP32 dims: [ 1 ] },
         { name: "top_token_ids" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "top_logprobs" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "finish_reason" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "usage" data_type: TYPE_INT32 dims: [ 3 ] } ]
"""
FLOOR = -9999.0
TOKENS = ["\x00", "c", "d"]
LPS = [-1.25, FLOOR, -0.5]
TOPS = [{"\x00": -1.25, "b": FLOOR}, {"c": FLOOR, "\x00": FLOOR}, {"d": -0.5}]


@pytest.fixture(scope="module")
def server():
    backends = os.path.join(os.environ.get("CINFER_BUILD_DIR", "build"), "backends")
    assert os.path.isfile(os.path.join(backends, "lpscript", "libcinfer_lpscript.so")), backends
    repo = tempfile.mkdtemp(prefix="cinfer-lpscript-")
    os.makedirs(os.path.join(repo, MODEL, "1"))
    with open(os.path.join(repo, MODEL, "config.pbtxt"), "w") as f:
        f.write(CONFIG)
    try:
        with Server(repo, ["--backend-directory", backends]) as s:
            s.wait_ready()
            yield s
    finally:
        shutil.rmtree(repo)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def strict(text):
    """json.loads that refuses NaN / Infinity / -Infinity, which JSON does not have."""
    def bad(c):
        raise ValueError(f"not JSON: {c}")
    return json.loads(text, parse_constant=bad)


def raw(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode()


def sse(text):
    out = []
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(strict(line[6:]))
    return out


def test_completions_whole(server, client):
    r = client.completions.create(model=MODEL, prompt="xy", max_tokens=3, logprobs=2)
    c = r.choices[0]
    assert c.text == "\x00cd"
    assert c.logprobs.tokens == TOKENS
    assert c.logprobs.token_logprobs == LPS
    assert c.logprobs.top_logprobs == TOPS
    assert c.logprobs.text_offset == [0, 1, 2]
    body = raw(server, "/v1/completions", {"model": MODEL, "prompt": "xy", "max_tokens": 3, "logprobs": 2})
    lp = strict(body)["choices"][0]["logprobs"]
    assert lp["tokens"] == TOKENS and lp["token_logprobs"] == LPS
    assert '"\\u0000"' in body and "-9999" in body


def test_completions_echo_whole_and_streamed(server, client):
    kw = dict(model=MODEL, prompt="xyz", max_tokens=3, logprobs=1, echo=True)
    c = client.completions.create(**kw).choices[0]
    assert c.text == "xyz\x00cd"
    assert c.logprobs.tokens == ["x", "y", "z"] + TOKENS
    # the prompt: the first token has none, the second was -inf, then -2
    assert c.logprobs.token_logprobs == [None, FLOOR, -2.0] + LPS
    assert c.logprobs.top_logprobs == [None, {"y": FLOOR}, {"z": -2.0}] + [dict(list(t.items())[:1]) for t in TOPS]
    assert c.logprobs.text_offset == [0, 1, 2, 3, 4, 5]
    tokens, lps, offs = [], [], []
    for ch in client.completions.create(stream=True, **kw):
        lp = ch.choices[0].logprobs
        if lp is not None:
            tokens += lp.tokens
            lps += lp.token_logprobs
            offs += lp.text_offset
    assert tokens == c.logprobs.tokens and lps == c.logprobs.token_logprobs and offs == c.logprobs.text_offset


def test_completions_streamed(server, client):
    kw = dict(model=MODEL, prompt="xy", max_tokens=3, logprobs=2)
    tokens, lps, tops = [], [], []
    for ch in client.completions.create(stream=True, **kw):
        lp = ch.choices[0].logprobs
        if lp is not None:
            tokens += lp.tokens
            lps += lp.token_logprobs
            tops += lp.top_logprobs
    assert (tokens, lps, tops) == (TOKENS, LPS, TOPS)
    body = raw(server, "/v1/completions", dict(kw, stream=True))
    assert len(sse(body)) >= 3  # every chunk is strict JSON


def chat_entries(content):
    return [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs]) for t in content]


CHAT_WANT = [(tok, lp, list(top.items())) for tok, lp, top in zip(TOKENS, LPS, TOPS)]


def test_chat_whole_and_streamed(server, client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3, logprobs=True,
              top_logprobs=2)
    r = client.chat.completions.create(**kw)
    assert r.choices[0].message.content == "\x00cd"
    assert chat_entries(r.choices[0].logprobs.content) == CHAT_WANT
    got = []
    for ch in client.chat.completions.create(stream=True, **kw):
        if ch.choices and ch.choices[0].logprobs is not None:
            got += chat_entries(ch.choices[0].logprobs.content)
    assert got == CHAT_WANT
    body = raw(server, "/v1/chat/completions", {k: v for k, v in kw.items()})
    entries = strict(body)["choices"][0]["logprobs"]["content"]  # was "-inf": not JSON
    assert [e["logprob"] for e in entries] == LPS
    assert sse(raw(server, "/v1/chat/completions", dict(kw, stream=True)))
