"""Model names up to the one limit, CINFER_MODEL_NAME_MAX (255 bytes: the longest folder name,
so every model the repository can hold): a 255-byte name is reachable whole by every front
end (HTTP v2 infer, ready, metadata, config, stats, generate, the repository index; the
OpenAI `model`; gRPC), and a 256-byte one is a 400 / INVALID_ARGUMENT that names the limit,
never a truncation to a model that exists. Checked with tritonclient (HTTP and gRPC), the
openai package and raw HTTP against the real binary."""
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo, write_model

LIMIT = 255
ID = "i" * LIMIT                 # an identity model with the longest name
LLM = "s" * (LIMIT - 1) + "m"    # SmolLM2 under the longest name
LIMIT_TEXT = f"is longer than the limit of {LIMIT} bytes"
ID_CFG = """name: "{}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
"""


@pytest.fixture(scope="module")
def server():
    repo = copy_repo(["smollm2"])
    os.rename(os.path.join(repo, "smollm2"), os.path.join(repo, LLM))
    cfg = os.path.join(repo, LLM, "config.pbtxt")
    with open(cfg) as f:
        text = f.read().replace('name: "smollm2"', f'name: "{LLM}"')
    with open(cfg, "w") as f:
        f.write(text)
    write_model(repo, ID, ID_CFG.format(ID))
    # a 256-byte name that differs from ID only in its last byte: a cut name would reach ID
    try:
        with Server(repo, ["--model-control-mode", "explicit", "--load-model", ID,
                           "--load-model", LLM]) as s:
            s.wait_ready()
            s.grpc_url = f"127.0.0.1:{s.grpc_port}"
            yield s
    finally:
        shutil.rmtree(repo)


def http(server, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def fp32(x):
    i = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return i


def test_longest_name_over_http(server):
    c = httpclient.InferenceServerClient(server.hostport)
    x = np.array([[1.5, -2.0]], dtype=np.float32)
    r = c.infer(ID, [fp32(x)])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    assert r.get_response()["model_name"] == ID
    assert c.is_model_ready(ID) and c.is_model_ready(ID, "1")
    assert c.get_model_metadata(ID)["name"] == ID
    assert c.get_model_config(ID)["name"] == ID
    assert c.get_inference_statistics(ID)["model_stats"][0]["name"] == ID
    assert {m["name"] for m in c.get_model_repository_index()} == {ID, LLM}
    # percent-encoded: 765 characters in the path, 255 bytes once decoded
    enc = "".join(f"%{b:02X}" for b in ID.encode())
    code, body = http(server, "GET", f"/v2/models/{enc}")
    assert code == 200 and body["name"] == ID
    code, body = http(server, "POST", f"/v2/models/{ID}/generate", {"INPUT0": [1, 2.5]})
    assert code == 200 and body["OUTPUT0"] == [1, 2.5] and body["model_name"] == ID
    code, body = http(server, "POST", f"/v2/models/{LLM}/generate",
                      {"text_input": "Hi", "parameters": {"max_tokens": 2, "temperature": 0}})
    assert code == 200 and body["model_name"] == LLM, body
    c.close()


def test_longest_name_over_grpc(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    x = np.array([[3.0]], dtype=np.float32)
    i = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    i.set_data_from_numpy(x)
    r = g.infer(ID, [i])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    assert r.get_response().model_name == ID
    assert g.is_model_ready(ID)
    assert g.get_model_metadata(ID).name == ID
    assert g.get_model_config(ID).config.name == ID
    assert g.get_inference_statistics(ID).model_stats[0].name == ID
    g.close()


def test_longest_name_over_openai(server):
    o = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    assert LLM in {m.id for m in o.models.list()}
    r = o.completions.create(model=LLM, prompt="The capital of France is", max_tokens=2, temperature=0)
    assert r.model == LLM and r.choices[0].text
    r = o.chat.completions.create(model=LLM, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
    assert r.model == LLM
    code, body = http(server, "GET", "/tokenizer_info?model=" + LLM)
    assert code == 200, body


TOO_LONG = ID + "i"  # 256 bytes; cut to 255 it would be ID


def test_too_long_name_over_http_names_the_limit(server):
    for method, path, body in [("POST", f"/v2/models/{TOO_LONG}/infer", {"inputs": []}),
                               ("GET", f"/v2/models/{TOO_LONG}/ready", None),
                               ("GET", f"/v2/models/{TOO_LONG}", None),
                               ("GET", f"/v2/models/{TOO_LONG}/config", None),
                               ("GET", f"/v2/models/{TOO_LONG}/stats", None),
                               ("POST", f"/v2/models/{TOO_LONG}/generate", {"INPUT0": [1]}),
                               ("POST", f"/v2/repository/models/{TOO_LONG}/load", {}),
                               ("POST", f"/v2/repository/models/{TOO_LONG}/unload", {})]:
        code, got = http(server, method, path, body)
        assert code == 400, (path, code, got)
        assert "request path segment of 256 bytes " + LIMIT_TEXT in got["error"], got
    c = httpclient.InferenceServerClient(server.hostport)
    with pytest.raises(InferenceServerException, match=LIMIT_TEXT):
        c.infer(TOO_LONG, [fp32(np.ones((1, 1), dtype=np.float32))])
    c.close()


def test_too_long_name_over_grpc_names_the_limit(server):
    g = grpcclient.InferenceServerClient(server.grpc_url)
    i = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
    i.set_data_from_numpy(np.ones((1, 1), dtype=np.float32))
    calls = [lambda: g.infer(TOO_LONG, [i]), lambda: g.is_model_ready(TOO_LONG),
             lambda: g.get_model_metadata(TOO_LONG), lambda: g.get_model_config(TOO_LONG),
             lambda: g.get_inference_statistics(TOO_LONG), lambda: g.unload_model(TOO_LONG),
             lambda: g.load_model(TOO_LONG)]
    for call in calls:
        with pytest.raises(InferenceServerException) as e:
            call()
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT", e.value
        assert "model name of 256 bytes " + LIMIT_TEXT in e.value.message(), e.value
    # a load from file: contents needs no folder, and is refused by the same limit
    onnx_cfg = json.dumps({"backend": "identity", "max_batch_size": 8,
                           "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                           "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]})
    with pytest.raises(InferenceServerException, match=LIMIT_TEXT):
        g.load_model(TOO_LONG, config=onnx_cfg, files={"file:1/x": b"x"})
    assert g.is_model_ready(ID)  # never mistaken for ID
    g.close()


def test_too_long_name_over_openai_names_the_limit(server):
    o = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    long_llm = LLM + "m"
    with pytest.raises(openai.BadRequestError) as e:
        o.completions.create(model=long_llm, prompt="Hi", max_tokens=1)
    assert "model name of 256 bytes " + LIMIT_TEXT in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        o.chat.completions.create(model=long_llm, messages=[{"role": "user", "content": "Hi"}], max_tokens=1)
    assert LIMIT_TEXT in str(e.value)
    code, body = http(server, "GET", "/tokenizer_info?model=" + long_llm)
    assert code == 400 and LIMIT_TEXT in json.dumps(body), body
