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


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 40}}, "required": ["tz"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Local time in a time zone",
                                           "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris today?"}]


def check_call(call):
    assert call.type == "function" and call.id
    assert call.function.name in SCHEMAS
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_tool_choice_required_returns_a_parseable_call(client):
    for seed in range(5):
        r = client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=120)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls", ch
        assert ch.message.content is None
        assert len(ch.message.tool_calls) == 1
        check_call(ch.message.tool_calls[0])


def test_named_tool_streamed(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, stream=True, max_tokens=120, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls, finish = {}, None
    for chunk in stream:
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                e = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                e["name"] += tc.function.name or ""
                e["arguments"] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert [c["name"] for c in calls.values()] == ["get_time"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), TIME)


def test_tool_choice_auto_is_prose_or_valid_calls(client):
    kinds = set()
    for seed, q in enumerate(["What is the weather in Paris today?", "Tell me a joke about cats.",
                              "What time is it in Tokyo?", "Hello!"]):
        r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": q}], tools=TOOLS,
                                           temperature=1.0, seed=seed, max_tokens=100)
        ch = r.choices[0]
        if ch.message.tool_calls:
            assert ch.finish_reason == "tool_calls"
            for call in ch.message.tool_calls:
                check_call(call)
            kinds.add("calls")
        elif ch.finish_reason == "stop":
            assert ch.message.content and ch.message.content.lstrip()[0] not in "[{"
            kinds.add("prose")
    assert kinds


def test_tool_results_in_the_conversation(client):
    msgs = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                              "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 18, \"sky\": \"cloudy\"}"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, tools=TOOLS, tool_choice="none",
                                       temperature=0, max_tokens=40)
    ch = r.choices[0]
    assert ch.message.tool_calls is None and ch.message.content
    assert r.usage.prompt_tokens > 100  # the tools, the call and its result were in the prompt


def test_bad_tools_are_400_with_the_reason(client):
    bad_schema = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"mail": {"type": "string", "format": "email"}}}}}]
    cases = [
        (dict(tools=bad_schema, tool_choice="required"), "unsupported keyword (its constraint would not be enforced): 'format'"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]), "must be a JSON Schema object"),
        (dict(tools=[{"type": "function", "function": {"name": "no spaces"}}]), "letters, digits"),
        (dict(tools=[{"type": "retrieval"}]), "tools[0] must be"),
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "not in 'tools'"),
        (dict(tools=TOOLS, tool_choice="sometimes"), "'tool_choice' must be"),
        (dict(tool_choice="required"), "'tool_choice' needs 'tools'"),
        (dict(tools=TOOLS, response_format={"type": "json_object"}), "not both"),
        (dict(extra_body={"functions": [{"name": "f"}]}), "use 'tools'"),
        (dict(tools=TOOLS + TOOLS[:1]), "used twice"),
    ]
    for kw, want in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, **kw)
        assert want in str(e.value), (kw, str(e.value))
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", max_tokens=2, extra_body={"tools": TOOLS})
    assert "/v1/chat/completions" in str(e.value)


LLAMA3_STYLE = ("{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + "
                "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
                "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
                "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


def _with_template(repo, name, template):
    import os
    import shutil
    src = os.path.join(repo, MODEL)
    dst = os.path.join(repo, name)
    shutil.copytree(src, dst, symlinks=True)
    cfg = open(os.path.join(dst, "config.pbtxt")).read().replace(f'name: "{MODEL}"', f'name: "{name}"')
    esc = template.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    cfg += f'parameters {{ key: "chat_template" value: {{ string_value: "{esc}" }} }}\n'
    open(os.path.join(dst, "config.pbtxt"), "w").write(cfg)


def test_chat_templates_are_jinja_and_unsupported_ones_fail_the_load():
    import time
    import jinja2
    repo = copy_repo([MODEL])
    _with_template(repo, "llama3_style", LLAMA3_STYLE)
    _with_template(repo, "bad_template", "{% macro greet(m) %}{{ m }}{% endmacro %}{{ greet(messages) }}")
    with Server(repo) as s:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            req = urllib.request.Request(s.url + "/v2/repository/index", data=b"{}", method="POST")
            idx = {m["name"]: m for m in json.loads(urllib.request.urlopen(req).read())}
            if all(idx.get(n, {}).get("state") in ("READY", "UNAVAILABLE") for n in (MODEL, "llama3_style", "bad_template")):
                break
            time.sleep(0.1)
        assert idx["bad_template"]["state"] == "UNAVAILABLE"
        assert "unsupported Jinja statement 'macro'" in idx["bad_template"]["reason"], idx["bad_template"]
        assert idx["llama3_style"]["state"] == "READY"
        # the model's prompt is the template rendered as Jinja2 renders it
        msgs = [{"role": "user", "content": "  Name a color.  "}]
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        want = env.from_string(LLAMA3_STYLE).render(messages=msgs, add_generation_prompt=True,
                                                    bos_token="<|im_start|>", eos_token="<|im_end|>")
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)
        r = client.chat.completions.create(model="llama3_style", messages=msgs, max_tokens=4, temperature=0)
        body = json.dumps({"model": "llama3_style", "content": want, "add_special": False}).encode()
        toks = json.loads(urllib.request.urlopen(urllib.request.Request(s.url + "/tokenize", data=body)).read())["tokens"]
        assert r.usage.prompt_tokens == len(toks)
