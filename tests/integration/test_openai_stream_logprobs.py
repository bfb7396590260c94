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


@pytest.mark.parametrize("chat,field,value", [
    (True, "best_of", 2), (True, "min_tokens", 4), (True, "echo", True), (True, "max_tokns", 3),
    (False, "suffix", "x"), (False, "top_logprobs", 2), (False, "stop_token_ids", [13]),
    (True, "guided_json", {"type": "object"})])
def test_unknown_fields_are_refused_not_ignored(client, chat, field, value):
    """OpenAI answers a field it does not know with 400 "Unrecognized request argument
    supplied"; so does cinfer, naming the field, instead of answering as if it had not been
    sent (a client setting vLLM's min_tokens would otherwise get shorter answers silently)."""
    kw = dict(model=MODEL, max_tokens=2, temperature=0, extra_body={field: value})
    with pytest.raises(openai.BadRequestError) as e:
        if chat:
            client.chat.completions.create(messages=[{"role": "user", "content": "Hi"}], **kw)
        else:
            client.completions.create(prompt="Hi", **kw)
    assert e.value.status_code == 400
    assert f"Unrecognized request argument supplied: {field}" in e.value.message
    assert e.value.body["param"] == field


def test_caller_description_fields_are_accepted(client):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                       temperature=0, user="u1", metadata={"team": "a"}, store=False)
    assert r.choices[0].finish_reason == "length"


def test_top_logprobs_without_logprobs_is_refused(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                       top_logprobs=2)
    assert "'top_logprobs' needs 'logprobs': true" in e.value.message
