"""Triton's generate extension (/v2/models/M/generate and /generate_stream) against the real
binary: the LLM backend serving SmolLM2-135M (decoupled) and the identity backend
(non-decoupled), with requests/raw sockets as Triton's docs use curl (issue 19, item 5)."""
import json
import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request

import openai
import pytest
import tritonclient.http as httpclient

from cinfer_server import Server, copy_repo, metric

LLM = "smollm2"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    trace = str(tmp_path_factory.mktemp("trace") / "trace.json")
    repo = copy_repo([LLM, "identity_fp32", "identity_string"])
    with Server(repo, ["--trace-config", f"triton,file={trace}"]) as s:
        s.wait_ready()
        s.trace = trace
        yield s


def post(server, path, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def events(body):
    """SSE body -> the JSON of each `data:` event; every event is `data: {...}\\n\\n`."""
    assert body.endswith("\n\n") or body == ""
    out = []
    for chunk in body.split("\n\n")[:-1]:
        assert chunk.startswith("data: "), chunk
        out.append(json.loads(chunk[6:]))
    return out


def openai_text(server, max_tokens):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    r = c.completions.create(model=LLM, prompt=PROMPT, max_tokens=max_tokens, temperature=0)
    return r.choices[0].text


def test_generate_llm_matches_the_openai_path(server):
    code, ctype, body = post(server, f"/v2/models/{LLM}/generate",
                             {"id": "42", "text_input": PROMPT,
                              "parameters": {"max_tokens": 8, "temperature": 0}})
    assert code == 200 and ctype == "application/json", body
    got = json.loads(body)
    assert set(got) == {"id", "model_name", "model_version", "text_output"}
    assert (got["id"], got["model_name"], got["model_version"]) == ("42", LLM, "1")
    # the same greedy generation as the OpenAI completions endpoint: one request path
    assert got["text_output"] == openai_text(server, 8) != ""


def test_generate_with_versions_in_the_path(server):
    code, _, body = post(server, f"/v2/models/{LLM}/versions/1/generate",
                         {"text_input": PROMPT, "parameters": {"max_tokens": 2, "temperature": 0}})
    assert code == 200 and json.loads(body)["model_version"] == "1"


def test_generate_stream_llm(server):
    code, ctype, body = post(server, f"/v2/models/{LLM}/generate_stream",
                             {"text_input": PROMPT,
                              "parameters": {"max_tokens": 8, "temperature": 0, "stream": True}})
    assert code == 200 and ctype == "text/event-stream; charset=utf-8", body
    evs = events(body)
    assert len(evs) >= 8  # one event per token (and the finishing one)
    for e in evs:
        assert e["model_name"] == LLM and e["model_version"] == "1" and "text_output" in e
    assert "".join(e["text_output"] for e in evs) == openai_text(server, 8)
    assert evs[-1]["finish_reason"] == "length"
    assert evs[-1]["usage"][1] == 8  # completion tokens


def test_generate_stream_without_stream_parameter_is_one_event(server):
    # parameters pass through as they are (Triton): the llm backend's stream=false answers
    # once, so the stream carries one event with the whole text
    code, _, body = post(server, f"/v2/models/{LLM}/generate_stream",
                         {"text_input": PROMPT, "parameters": {"max_tokens": 4, "temperature": 0}})
    assert code == 200
    (e,) = events(body)
    assert e["text_output"] == openai_text(server, 4)


def test_generate_refuses_a_streaming_model(server):
    code, _, body = post(server, f"/v2/models/{LLM}/generate",
                         {"text_input": PROMPT, "parameters": {"max_tokens": 64, "stream": True}})
    assert code == 400
    assert json.loads(body)["error"] == (
        "generate expects model to produce exactly 1 response, use generate stream for model "
        "that generates various number of responses")


def test_generate_on_a_non_decoupled_model(server):
    # Triton maps inputs by name at the top level (and in "parameters"); outputs come back
    # as top-level fields, a scalar for one element
    code, _, body = post(server, "/v2/models/identity_fp32/generate", {"INPUT0": [1, 2.5, -3]})
    assert code == 200, body
    assert json.loads(body) == {"model_name": "identity_fp32", "model_version": "1", "OUTPUT0": [1, 2.5, -3]}
    code, _, body = post(server, "/v2/models/identity_fp32/generate", {"parameters": {"INPUT0": 4}})
    assert code == 200 and json.loads(body)["OUTPUT0"] == 4, body
    code, _, body = post(server, "/v2/models/identity_string/generate_stream", {"id": "s", "INPUT0": "hello"})
    assert code == 200, body
    assert events(body) == [{"id": "s", "model_name": "identity_string", "model_version": "1", "OUTPUT0": "hello"}]


@pytest.mark.parametrize("path,body,status,text", [
    (f"/v2/models/{LLM}/generate", {"text_input": PROMPT, "parameters": {"max_tokens": [1]}}, 400,
     "parameter 'max_tokens' has invalid type. It should be either 'int', 'bool', or 'string'."),
    (f"/v2/models/{LLM}/generate", {"text_input": PROMPT, "parameters": "max_tokens=1"}, 400,
     "Expected JSON object for keyword: 'parameters'"),
    (f"/v2/models/{LLM}/generate", {"text_input": 12}, 400, "expected a string for datatype BYTES"),
    (f"/v2/models/{LLM}/generate", {"id": 7, "text_input": PROMPT}, 400, "'id' must be a string"),
    (f"/v2/models/{LLM}/generate", {"parameters": {"max_tokens": 1}}, 400, "input 'text_input' is missing"),
    (f"/v2/models/{LLM}/generate_stream", {"text_input": PROMPT, "parameters": {"temperature": -1}}, 400,
     "temperature"),
    (f"/v2/models/{LLM}/generate_stream", {"text_input": "x " * 3000, "parameters": {"stream": True}}, 400,
     "maximum context length"),
    ("/v2/models/identity_fp32/generate", {"INPUT0": [[1, 2]]}, 400, "must be a scalar or a 1-D array"),
    ("/v2/models/identity_fp32/generate", {"INPUT0": ["a"]}, 400, "expected a number for datatype FP32"),
    ("/v2/models/nope/generate", {"text_input": "x"}, 404, "unknown model: 'nope'"),
    ("/v2/models/nope/generate_stream", {"text_input": "x"}, 404, "unknown model: 'nope'"),
    (f"/v2/models/{LLM}/versions/x/generate", {"text_input": "x"}, 400, "invalid model version 'x'"),
])
def test_bad_requests_are_clear_errors(server, path, body, status, text):
    code, ctype, got = post(server, path, body)
    assert code == status, got
    if ctype == "text/event-stream; charset=utf-8":
        # the engine refused the request in its first response: generate_stream answers it
        # as Triton does, an SSE error event under the error's status
        assert path.endswith("generate_stream"), got
        (ev,) = events(got)
        assert text in ev["error"], got
    else:
        assert ctype == "application/json", got
        assert text in json.loads(got)["error"], got


def test_body_must_be_a_json_object(server):
    code, _, got = post(server, f"/v2/models/{LLM}/generate", None, raw=b"[1, 2]")
    assert code == 400 and "must be a JSON object" in json.loads(got)["error"]
    req = urllib.request.Request(server.url + f"/v2/models/{LLM}/generate", method="GET")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 405


def test_client_disconnect_cancels_the_stream(server):
    running = 'model="smollm2"'
    fail0 = metric(server, "cinfer_request_failure_total",
                   f'model="{LLM}",version="1",reason="cancelled"') or 0
    body = json.dumps({"text_input": "Write a very long story about dragons.",
                       "parameters": {"max_tokens": 1500, "temperature": 0.8, "stream": True,
                                      "ignore_eos": True}}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(f"POST /v2/models/{LLM}/generate_stream HTTP/1.1\r\nHost: x\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"data: ") < 3:  # a few tokens streamed: the sequence is running
        chunk = s.recv(4096)
        assert chunk
        got += chunk
    assert got.startswith(b"HTTP/1.1 200")
    assert metric(server, "cinfer_llm_running_sequences", running) >= 1
    s.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and metric(server, "cinfer_llm_running_sequences", running) != 0:
        time.sleep(0.05)
    assert metric(server, "cinfer_llm_running_sequences", running) == 0
    while time.monotonic() < deadline and (metric(server, "cinfer_request_failure_total",
                                                  f'model="{LLM}",version="1",reason="cancelled"') or 0) < fail0 + 1:
        time.sleep(0.05)
    assert metric(server, "cinfer_request_failure_total",
                  f'model="{LLM}",version="1",reason="cancelled"') == fail0 + 1


def test_generate_requests_are_traced_like_any_other(server):
    c = httpclient.InferenceServerClient(server.hostport)
    c.update_trace_settings(model_name=LLM, settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1",
                                                      "trace_count": "1"})
    code, _, _ = post(server, f"/v2/models/{LLM}/generate_stream",
                      {"id": "traced", "text_input": PROMPT,
                       "parameters": {"max_tokens": 3, "temperature": 0, "stream": True}})
    assert code == 200
    deadline = time.monotonic() + 30
    entries = None
    while time.monotonic() < deadline and entries is None:
        try:
            with open(server.trace + ".0") as f:
                entries = json.load(f)
        except (OSError, ValueError):
            time.sleep(0.02)
    assert entries, "no trace written"
    head = entries[0]
    assert (head["model_name"], head["request_id"]) == (LLM, "traced")
    names = [e["timestamps"][0]["name"] for e in entries if "timestamps" in e]
    for stage in ("HTTP_RECV_START", "REQUEST_START", "QUEUE_START", "COMPUTE_START", "REQUEST_END",
                  "HTTP_SEND_START", "HTTP_SEND_END"):
        assert stage in names
    c.close()


REPEAT_CONFIG = """name: "repeat_int32"
backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def repeat():
    """Any decoupled model: the test backend tests/integration/backends/repeat.c, one
    response per element of IN, an error at a negative element."""
    backends = os.path.join(os.environ.get("CINFER_BUILD_DIR", "build"), "backends")
    assert os.path.isfile(os.path.join(backends, "repeat", "libcinfer_repeat.so")), backends
    repo = tempfile.mkdtemp(prefix="cinfer-repeat-")
    os.makedirs(os.path.join(repo, "repeat_int32", "1"))
    with open(os.path.join(repo, "repeat_int32", "config.pbtxt"), "w") as f:
        f.write(REPEAT_CONFIG)
    try:
        with Server(repo, ["--backend-directory", backends]) as s:
            s.wait_ready()
            yield s
    finally:
        shutil.rmtree(repo)


def test_decoupled_model_streams_one_event_per_response(repeat):
    code, ctype, body = post(repeat, "/v2/models/repeat_int32/generate_stream", {"IN": [3, 1, 4]})
    assert code == 200 and ctype == "text/event-stream; charset=utf-8", body
    assert events(body) == [{"model_name": "repeat_int32", "model_version": "1", "OUT": v, "IDX": i}
                            for i, v in enumerate([3, 1, 4])]


def test_decoupled_model_one_response_for_generate(repeat):
    # the final response without outputs only ends the request (Triton's flag-only one)
    code, _, body = post(repeat, "/v2/models/repeat_int32/generate", {"id": "one", "IN": 5})
    assert code == 200, body
    assert json.loads(body) == {"id": "one", "model_name": "repeat_int32", "model_version": "1",
                                "OUT": 5, "IDX": 0}


@pytest.mark.parametrize("values", [[1, 2], []])
def test_generate_needs_exactly_one_response(repeat, values):
    code, _, body = post(repeat, "/v2/models/repeat_int32/generate", {"IN": values})
    assert code == 400
    assert "generate expects model to produce exactly 1 response" in json.loads(body)["error"]


def test_error_mid_stream_is_an_error_event(repeat):
    code, _, body = post(repeat, "/v2/models/repeat_int32/generate_stream", {"IN": [7, 8, -1, 9]})
    assert code == 200, body  # the status line went out with the first event (as Triton)
    evs = events(body)
    assert [e.get("OUT") for e in evs[:2]] == [7, 8]
    assert evs[2:] == [{"error": "repeat: element 2 is negative (-1)"}]


def test_error_as_the_first_response_is_an_error_event_under_its_status(repeat):
    """Triton's generate_stream (L0_http/generate_endpoint_test.py
    test_generate_stream_response_error): the model's first response is an error, so the
    status is the error's and the body the stream's one event."""
    code, ctype, body = post(repeat, "/v2/models/repeat_int32/generate_stream", {"IN": [-5]})
    assert code == 500 and ctype == "text/event-stream; charset=utf-8", body
    assert events(body) == [{"error": "repeat: element 0 is negative (-5)"}]
