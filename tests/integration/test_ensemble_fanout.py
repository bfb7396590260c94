"""A decoupled step in the middle of an ensemble (Triton's ensemble scheduler): each response of
that step runs the steps after it, and each run is one response of the ensemble, in order.
This is how Triton users build LLM ensembles (pre-processing -> LLM -> post-processing, as
TensorRT-LLM's `ensemble` model does) and producer / consumer pipelines (L0_simple_ensemble's
decoupled_producer -> slow_consumer). Against the real binary with tritonclient gRPC and
HTTP generate_stream, on the real SmolLM2 model:

- the streamed tokens, post-processed one by one, equal the LLM's own stream (greedy);
- 0..N responses of a producer come back as N ensemble responses, in order, under
  concurrency;
- a failing step after the fan step ends that request with its error (no later responses)
  and leaves other requests and the server unharmed."""
import json
import os
import queue
import socket
import sys
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from cinfer_server import Server, copy_repo, metric, write_model

os.environ["CINFER_PYTHON"] = sys.executable

PRE_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            t = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor(
                "PROMPT", np.array([t.reshape(-1)[0].strip()], dtype=object))]))
        return out
"""
PRE_CFG = """
name: "pre"
backend: "python"
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "PROMPT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""
POST_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            t = pb_utils.get_input_tensor_by_name(r, "PIECE").as_numpy().reshape(-1)[0]
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("UPPER", np.array([t.upper()], dtype=object)),
                pb_utils.Tensor("NBYTES", np.array([len(t)], dtype=np.int32))]))
        return out
"""
POST_CFG = """
name: "post"
backend: "python"
input [ { name: "PIECE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "NBYTES" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
LLM_PIPE_CFG = """
name: "llm_pipe"
platform: "ensemble"
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ 1 ] },
         { name: "NBYTES" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "pre" model_version: -1
    input_map { key: "TEXT" value: "text_input" } output_map { key: "PROMPT" value: "prompt" } },
  { model_name: "smollm2" model_version: -1
    input_map { key: "text_input" value: "prompt" } output_map { key: "text_output" value: "piece" } },
  { model_name: "post" model_version: -1
    input_map { key: "PIECE" value: "piece" }
    output_map { key: "UPPER" value: "UPPER" } output_map { key: "NBYTES" value: "NBYTES" } } ] }
"""

PRODUCER_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            n = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy().reshape(-1)[0])
            s = r.get_response_sender()
            for i in range(n):
                s.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
PRODUCER_CFG = """
name: "producer"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"""
CONSUMER_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            v = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            if int(v.reshape(-1)[0]) == 13 and json.loads(r.parameters()).get("fail13"):
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("unlucky 13")))
            else:
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", (v * 0.5).astype(np.float32))]))
        return out
"""
CONSUMER_CFG = """
name: "consumer"
backend: "python"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
PIPE_CFG = """
name: "pipe"
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "producer" model_version: -1
    input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "n" } },
  { model_name: "consumer" model_version: -1
    input_map { key: "INPUT0" value: "n" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
"""


@pytest.fixture(scope="module")
def server():
    d = copy_repo(["smollm2"])
    for name, cfg, py in [("pre", PRE_CFG, PRE_PY), ("post", POST_CFG, POST_PY),
                          ("llm_pipe", LLM_PIPE_CFG, None), ("producer", PRODUCER_CFG, PRODUCER_PY),
                          ("consumer", CONSUMER_CFG, CONSUMER_PY), ("pipe", PIPE_CFG, None)]:
        write_model(d, name, cfg, py)
    with Server(d) as s:
        s.wait_ready(timeout=120)
        yield s


def sse_events(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    out = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


def stream(server, model, inputs, n_requests=1, parameters=None):
    """Sends n_requests on one gRPC stream; returns {request_id: [result, ...]} and, under
    "errors", the error messages (each ends its request). parameters: a dict, or a
    function of the request index giving one."""
    q = queue.Queue()
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    got = {str(i): [] for i in range(n_requests)}
    done = set()
    try:
        for i in range(n_requests):
            p = parameters(i) if callable(parameters) else parameters
            c.async_stream_infer(model, inputs(i), request_id=str(i), parameters=p,
                                 enable_empty_final_response=True)
        while len(done) < n_requests:
            result, error = q.get(timeout=120)
            if error is not None:  # an error ends its request (the id is in the message's stream)
                got.setdefault("errors", []).append(str(error))
                done.add(f"error{len(got['errors'])}")
                continue
            resp = result.get_response()
            final = resp.parameters["triton_final_response"].bool_param
            if final:
                done.add(resp.id)
                assert not resp.outputs, resp
            else:
                got[resp.id].append(result)
    finally:
        c.stop_stream()
    return got


def test_llm_tokens_stream_through_post_processing(server):
    params = {"max_tokens": 24, "temperature": 0, "stream": True}
    # the LLM alone, token by token
    direct = sse_events(server.url + "/v2/models/smollm2/generate_stream",
                        {"text_input": "The capital of France is", "parameters": params})
    # every response of the LLM (the last one, with finish_reason, has an empty text) runs
    # the post-processing step once
    pieces = [e["text_output"] for e in direct]
    assert len([p for p in pieces if p]) >= 8
    # the same prompt with spaces around it (pre strips them), through the ensemble over gRPC

    def inputs(i):
        t = grpcclient.InferInput("text_input", [1], "BYTES")
        t.set_data_from_numpy(np.array([b"  The capital of France is  "], dtype=object))
        return [t]
    got = stream(server, "llm_pipe", inputs, parameters=params)
    assert "errors" not in got, got
    upper = [r.as_numpy("UPPER")[0].decode() for r in got["0"]]
    nbytes = [int(r.as_numpy("NBYTES")[0]) for r in got["0"]]
    assert upper == [p.upper() for p in pieces]
    assert nbytes == [len(p.encode()) for p in pieces]
    # and over HTTP generate_stream: one event per token
    events = sse_events(server.url + "/v2/models/llm_pipe/generate_stream",
                        {"text_input": "The capital of France is", "parameters": params})
    assert [e["UPPER"] for e in events if "UPPER" in e] == [p.upper() for p in pieces]


def test_producer_responses_come_back_in_order_under_concurrency(server):
    counts = [0, 1, 5, 12, 40, 7, 3, 25]

    def inputs(i):
        t = grpcclient.InferInput("IN", [1], "INT32")
        t.set_data_from_numpy(np.array([counts[i]], dtype=np.int32))
        return [t]
    for _ in range(3):
        got = stream(server, "pipe", inputs, n_requests=len(counts))
        assert "errors" not in got, got
        for i, n in enumerate(counts):
            vals = [float(r.as_numpy("OUT")[0]) for r in got[str(i)]]
            assert vals == [0.5 * k for k in range(n)], (i, vals)


def test_a_failing_step_after_the_fan_step_ends_only_its_request(server):
    counts = [20, 15]  # both reach 13; the consumer refuses it for the first request only

    def inputs(i):
        t = grpcclient.InferInput("IN", [1], "INT32")
        t.set_data_from_numpy(np.array([counts[i]], dtype=np.int32))
        return [t]
    got = stream(server, "pipe", inputs, n_requests=2, parameters=lambda i: {"fail13": i == 0})
    assert len(got.get("errors", [])) == 1 and "unlucky 13" in got["errors"][0], got
    vals0 = [float(r.as_numpy("OUT")[0]) for r in got["0"]]
    assert vals0 == [0.5 * k for k in range(len(vals0))] and len(vals0) <= 13
    assert [float(r.as_numpy("OUT")[0]) for r in got["1"]] == [0.5 * k for k in range(15)]
    # the server is unharmed
    got = stream(server, "pipe", lambda i: inputs(1), n_requests=1)
    assert [float(r.as_numpy("OUT")[0]) for r in got["0"]] == [0.5 * k for k in range(15)]


def test_the_fanned_out_ensemble_is_decoupled(server):
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    cfg = c.get_model_config("pipe", as_json=True)["config"]
    assert cfg["platform"] == "ensemble"
    # unary ModelInfer cannot carry 0..N responses: refused with a reason
    t = grpcclient.InferInput("IN", [1], "INT32")
    t.set_data_from_numpy(np.array([2], dtype=np.int32))
    with pytest.raises(Exception) as e:
        c.infer("pipe", [t])
    assert "decoupled" in str(e.value).lower()


def test_a_client_that_goes_away_stops_the_llm_inside_the_ensemble(server):
    """The ensemble request is cancelled: its LLM step's sequence stops and frees its
    slot (cinfer_llm_running_sequences back to 0), counted as cancelled for the ensemble."""
    running = 'model="smollm2"'
    cancelled = 'model="llm_pipe",version="1",reason="cancelled"'
    fail0 = metric(server, "cinfer_request_failure_total", cancelled) or 0
    body = json.dumps({"text_input": "Write a very long story about dragons.",
                       "parameters": {"max_tokens": 1500, "temperature": 0.8, "stream": True,
                                      "ignore_eos": True}}).encode()
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    s.sendall(f"POST /v2/models/llm_pipe/generate_stream HTTP/1.1\r\nHost: x\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"data: ") < 3:  # a few tokens post-processed and streamed
        chunk = s.recv(4096)
        assert chunk
        got += chunk
    assert got.startswith(b"HTTP/1.1 200") and b'"UPPER"' in got
    assert metric(server, "cinfer_llm_running_sequences", running) >= 1
    s.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and metric(server, "cinfer_llm_running_sequences", running) != 0:
        time.sleep(0.05)
    assert metric(server, "cinfer_llm_running_sequences", running) == 0
    while time.monotonic() < deadline and (metric(server, "cinfer_request_failure_total", cancelled) or 0) < fail0 + 1:
        time.sleep(0.05)
    assert metric(server, "cinfer_request_failure_total", cancelled) == fail0 + 1
    # and the ensemble still serves
    events = sse_events(server.url + "/v2/models/llm_pipe/generate_stream",
                        {"text_input": "Hi", "parameters": {"max_tokens": 4, "temperature": 0, "stream": True}})
    assert len([e for e in events if "UPPER" in e]) >= 1
