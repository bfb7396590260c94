"""Streamed answers carry what whole answers carry: logprobs per token (completions and chat)
and, for completions with echo, the prompt (and its logprobs) as the first chunk, as vLLM
streams them. Checked with the official `openai` client against the real binary serving
SmolLM2: the streamed tokens, logprobs and text equal the whole answer's for the same greedy
request, and text_offset is each token's character offset in the returned text."""
import openai
import pytest

from cinfer_server import Server, copy_repo

MODEL = "smollm2"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def client():
    repo = copy_repo([MODEL])
    with Server(repo) as s:
        s.wait_ready()
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def check_offsets(text, lp):
    assert len(lp.text_offset) == len(lp.tokens)
    for tok, off in zip(lp.tokens, lp.text_offset):
        assert text[off:off + len(tok)] == tok, (off, tok, text)


@pytest.mark.parametrize("echo", [False, True])
def test_completions_stream_logprobs_equal_the_whole_answer(client, echo):
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, logprobs=2, echo=echo)
    whole = client.completions.create(**kw).choices[0]
    check_offsets(whole.text, whole.logprobs)
    text, tokens, lps, tops, offs = "", [], [], [], []
    chunks = list(client.completions.create(stream=True, **kw))
    if echo:  # the prompt first, scored as in the whole answer (its first token has none)
        first = chunks[0].choices[0]
        assert first.text == PROMPT
        assert first.logprobs.token_logprobs[0] is None
        assert "".join(first.logprobs.tokens) == PROMPT
    for ch in chunks:
        c = ch.choices[0]
        text += c.text
        if c.logprobs is not None:
            tokens += c.logprobs.tokens
            lps += c.logprobs.token_logprobs
            tops += c.logprobs.top_logprobs
            offs += c.logprobs.text_offset
    assert chunks[-1].choices[0].finish_reason == "length"
    assert text == whole.text
    assert tokens == whole.logprobs.tokens
    want_lps = whole.logprobs.token_logprobs
    assert [x is None for x in lps] == [x is None for x in want_lps]  # echo: the first prompt token
    assert [x for x in lps if x is not None] == pytest.approx([x for x in want_lps if x is not None])
    assert offs == whole.logprobs.text_offset
    assert [sorted(t) if t else t for t in tops] == [sorted(t) if t else t for t in whole.logprobs.top_logprobs]
    n_gen = len(tokens) - (len(chunks[0].choices[0].logprobs.tokens) if echo else 0)
    assert n_gen == 12


def test_completions_stream_echo_without_logprobs(client):
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0,
                                            echo=True, stream=True))
    assert chunks[0].choices[0].text == PROMPT
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0, echo=True)
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert all(c.choices[0].logprobs is None for c in chunks)


def test_chat_stream_logprobs_equal_the_whole_answer(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=10,
              temperature=0, logprobs=True, top_logprobs=3)
    whole = client.chat.completions.create(**kw).choices[0]
    want = whole.logprobs.content
    assert len(want) == 10
    got, text = [], ""
    for ch in client.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        c = ch.choices[0]
        text += c.delta.content or ""
        if c.logprobs is not None:
            got += c.logprobs.content
    assert text == whole.message.content
    assert [e.token for e in got] == [e.token for e in want]
    assert [e.logprob for e in got] == pytest.approx([e.logprob for e in want])
    assert [[t.token for t in e.top_logprobs] for e in got] == [[t.token for t in e.top_logprobs] for e in want]
