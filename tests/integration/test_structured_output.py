"""Structured output through the OpenAI API with the official `openai` client against the real
binary serving SmolLM2: response_format json_schema / json_object and GBNF grammars are decoded
under a token mask, so every answer validates (checked with `jsonschema`), whatever the
temperature; schemas and grammars that cannot be compiled are a 400 naming the reason."""
import json
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from cinfer_server import Server, copy_repo

MODEL = "smollm2"

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "city": {"type": "string"},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 3},
        "mood": {"enum": ["happy", "sad", "calm"]},
        "pet": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {
            "kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer"}}, "required": ["kind"]}]},
    },
    "required": ["name", "age", "hobbies", "mood"],
    "additionalProperties": False,
}

TOPICS = ["a baker", "a pilot", "a child", "a farmer", "an old sailor", "a chess player", "a teacher",
          "a nurse", "a painter", "a student", "a singer", "a doctor", "a climber", "a writer", "a chef",
          "a runner", "a poet", "a driver", "a gardener", "a judge", "a dancer", "a monk", "a miner",
          "a fisher", "a baker from Paris", "a knight", "a robot", "a wizard", "a spy", "a queen",
          "a clown", "a pirate", "a scientist", "an astronaut", "a cowboy", "a detective", "a ghost",
          "a programmer", "a librarian", "a tailor", "a potter", "a hunter", "a barber", "a mayor",
          "a soldier", "a violinist", "a surfer", "a photographer", "a beekeeper", "a carpenter"]


@pytest.fixture(scope="module")
def server():
    repo = copy_repo([MODEL])
    with Server(repo) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def metric(server, name):
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{model="{MODEL}"}}'):
            return float(line.split()[-1])
    return None


def test_json_schema_valid_on_50_prompts_at_temperature_1(client, server):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}

    def ask(i):
        r = client.chat.completions.create(
            model=MODEL, temperature=1.0, seed=i, max_tokens=160, response_format=fmt,
            messages=[{"role": "user", "content": f"Describe {TOPICS[i]} as a JSON object."}])
        return r.choices[0]

    masks_before = metric(server, "cinfer_llm_grammar_masks_total") or 0
    with ThreadPoolExecutor(8) as ex:
        choices = list(ex.map(ask, range(50)))
    texts = set()
    for ch in choices:
        # max_tokens bounds the text, so a choice may stop early; every complete one validates
        if ch.finish_reason == "length":
            continue
        assert ch.finish_reason == "stop"
        doc = json.loads(ch.message.content)
        jsonschema.validate(doc, PERSON)
        texts.add(ch.message.content)
    assert len([c for c in choices if c.finish_reason == "stop"]) >= 40
    assert len(texts) >= 20  # temperature 1: really sampled, not one answer
    assert metric(server, "cinfer_llm_grammar_tokens_total") > 0
    assert metric(server, "cinfer_llm_grammar_masks_total") > masks_before


def test_json_object_greedy_and_streamed(client):
    kw = dict(model=MODEL, temperature=0, max_tokens=80, response_format={"type": "json_object"},
              messages=[{"role": "user", "content": "Give the capital of France and Italy in JSON."}])
    whole = client.chat.completions.create(**kw)
    doc = json.loads(whole.choices[0].message.content)
    assert isinstance(doc, dict) and doc
    pieces = []
    for chunk in client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
    assert "".join(pieces) == whole.choices[0].message.content


def test_free_text_answer_is_not_json_without_the_constraint(client):
    # the same question unconstrained: the model answers in prose (so the constraint is what
    # made the answers above JSON)
    r = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=40,
                                       messages=[{"role": "user", "content": "Describe a baker."}])
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.choices[0].message.content)


def test_gbnf_grammar_on_completions_and_chat(client):
    g = 'root ::= ("yes" | "no") ", because " [a-z ]{3,40} "."'
    for i in range(6):
        r = client.completions.create(model=MODEL, prompt=f"Question {i}: is water wet? Answer:", max_tokens=40,
                                      temperature=1.0, seed=i, extra_body={"grammar": g})
        assert r.choices[0].finish_reason == "stop", r.choices[0].text
        assert re.fullmatch(r"(yes|no), because [a-z ]{3,40}\.", r.choices[0].text), r.choices[0].text
    r = client.chat.completions.create(model=MODEL, temperature=0, max_tokens=8,
                                       messages=[{"role": "user", "content": "Pick a number from 1 to 9."}],
                                       extra_body={"grammar": "root ::= [1-9]"})
    assert re.fullmatch(r"[1-9]", r.choices[0].message.content)
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == 1


def test_bad_schema_and_grammar_are_400_with_the_reason(client):
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "string", "pattern": "^a+$"}}}), "unsupported keyword (its constraint would not be enforced): 'pattern'"),
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "$ref": "#/$defs/nope"}}}), "does not exist"),
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "x"}}), "needs 'json_schema'"),
        (dict(response_format={"type": "xml"}), "must be 'text', 'json_object' or 'json_schema'"),
        (dict(extra_body={"grammar": 'root ::= "a" (b'}), "line 1, column 14: unbalanced '('"),
        (dict(extra_body={"grammar": "root ::= root \"a\""}), "left-recursive"),
        (dict(extra_body={"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}), "not both"),
        (dict(logit_bias={"1": 5}), "'logit_bias' is not supported"),
    ]
    for kw, want in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, **kw)
        assert want in str(e.value), (kw, str(e.value))
    # the server is unharmed
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=4, temperature=0)
    assert r.choices[0].message.content


def test_schema_is_compiled_once(client, server):
    # a schema sent with every request is compiled once (the model's grammar cache)
    schema = {"type": "object", "properties": {"word": {"enum": ["alpha", "beta", "gamma"]}}, "required": ["word"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}
    kw = dict(model=MODEL, temperature=0, max_tokens=20, response_format=fmt,
              messages=[{"role": "user", "content": "Pick a Greek letter."}])
    before = metric(server, "cinfer_llm_grammar_compiles_total")
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert metric(server, "cinfer_llm_grammar_compiles_total") == before + 1
    assert a == b and json.loads(a)["word"] in ("alpha", "beta", "gamma")
