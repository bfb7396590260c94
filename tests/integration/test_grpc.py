"""The KServe v2 gRPC endpoint (`cinfer serve --grpc-port`) with the clients users use:
tritonclient.grpc (sync and aio), grpcio stubs and raw calls, perf_analyzer -i grpc, and
hand-made HTTP/2 frames for what a client library would never send."""
import asyncio
import json
import os
import queue
import socket
import subprocess
import time
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.grpc.aio as tga
from google.protobuf import descriptor_pb2, json_format
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from cinfer_server import Server
from test_perf_analyzer import perf_analyzer_bin, perf_analyzer_env

MODELS = ["identity", "identity_fp32", "identity_string", "identity_pair", "identity_bool",
          "identity_int8", "identity_int16", "identity_int32", "identity_int64", "identity_uint8",
          "identity_uint16", "identity_uint32", "identity_uint64", "identity_fp64", "identity_fp16",
          "smollm2", "sim_detector"]
LLM = "smollm2"


@pytest.fixture(scope="module")
def server():
    args = ["--model-control-mode", "explicit", "--grpc-max-message-bytes", str(8 << 20)]
    for m in MODELS:
        args += ["--load-model", m]
    with Server(args=args) as s:
        s.wait_ready()
        assert s.grpc_port
        s.grpc_url = f"127.0.0.1:{s.grpc_port}"
        yield s


@pytest.fixture
def client(server):
    return tg.InferenceServerClient(server.grpc_url)


@pytest.fixture
def stub(server):
    ch = grpc.insecure_channel(server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(ch)
    ch.close()


def http_json(server, path, body=None):
    req = urllib.request.Request(server.url + path, data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def status_of(fn):
    with pytest.raises(grpc.RpcError) as e:
        fn()
    return e.value.code(), e.value.details()


def triton_status(fn):
    with pytest.raises(InferenceServerException) as e:
        fn()
    return e.value.status(), e.value.message()


def unharmed(server):
    c = tg.InferenceServerClient(server.grpc_url)
    assert c.is_server_live() and c.is_server_ready()
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    i = tg.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    assert np.array_equal(c.infer("identity", [i]).as_numpy("OUTPUT0"), x)


# ---- the message definitions ---------------------------------------------------------------

def _messages(fds):
    out = {}

    def walk(msgs, prefix):
        for m in msgs:
            out[prefix + m.name] = {f.name: (f.number, f.type, f.label, f.type_name) for f in m.field}
            walk(m.nested_type, prefix + m.name + ".")
    for fd in fds:
        walk(fd.message_type, fd.package + ".")
    return out


def test_proto_field_numbers_match_tritonclient():
    """Our .proto files (written from the specification) against the descriptors
    tritonclient ships: every message and field we define has the same number, type,
    label and message type; the service's request/response messages are complete."""
    path = os.path.join(os.environ["CINFER_BUILD_DIR"], "src", "grpc", "gen", "grpc_service.desc")
    ours = descriptor_pb2.FileDescriptorSet()
    with open(path, "rb") as f:
        ours.ParseFromString(f.read())
    theirs = []
    for mod in (service_pb2, model_config_pb2):
        fd = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(fd)
        theirs.append(fd)
    mine, ref = _messages([f for f in ours.file if f.package == "inference"]), _messages(theirs)
    assert len(mine) > 100
    for name, fields in mine.items():
        assert name in ref, name
        for fname, spec in fields.items():
            assert ref[name].get(fname) == spec, (name, fname, spec, ref[name].get(fname))
    for name in ref:
        if name.startswith("inference.Model") and "Config" not in name or "Infer" in name:
            if name in mine:
                assert set(ref[name]) == set(mine[name]), name
    svc_ours = next(f for f in ours.file if f.name == "grpc_service.proto").service[0]
    svc_ref = theirs[0].service[0]
    assert [(m.name, m.input_type, m.output_type, m.client_streaming, m.server_streaming) for m in svc_ours.method] == \
           [(m.name, m.input_type, m.output_type, m.client_streaming, m.server_streaming) for m in svc_ref.method]


# ---- health, metadata, configuration -----------------------------------------------------

def test_health_and_readiness(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("identity_fp32")
    assert client.is_model_ready("identity_fp32", "1")
    code, msg = triton_status(lambda: client.is_model_ready("no_such_model"))
    assert code == "StatusCode.NOT_FOUND" and "no_such_model" in msg
    code, msg = triton_status(lambda: client.is_model_ready("identity_fp32", "x1"))
    assert code == "StatusCode.INVALID_ARGUMENT" and "invalid model version" in msg


def test_grpc_health_check_raw_and_unknown_service(server):
    ch = grpc.insecure_channel(server.grpc_url)
    check = ch.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                           response_deserializer=lambda b: b)
    assert check(b"", timeout=10) == b"\x08\x01"  # status: SERVING
    svc = b"inference.GRPCInferenceService"
    assert check(b"\x0a" + bytes([len(svc)]) + svc, timeout=10) == b"\x08\x01"
    with pytest.raises(grpc.RpcError) as e:
        check(b"\x0a\x03foo", timeout=10)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND and "foo" in e.value.details()
    watch = ch.unary_stream("/grpc.health.v1.Health/Watch", request_serializer=lambda b: b,
                            response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        list(watch(b"", timeout=10))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    ch.close()


def test_server_and_model_metadata_match_http(server, client):
    md = client.get_server_metadata(as_json=True)
    hmd = http_json(server, "/v2")
    assert md["name"] == hmd["name"] and md["version"] == hmd["version"]
    # the same list, less the extensions whose RPCs this endpoint does not serve yet
    http_only = {"generate"}
    assert md["extensions"] == [e for e in hmd["extensions"] if e not in http_only]
    for m in ("identity_fp32", "identity_pair", LLM, "sim_detector"):
        g = client.get_model_metadata(m, as_json=True)
        h = http_json(server, f"/v2/models/{m}")
        assert g["name"] == h["name"] and g["versions"] == h["versions"] and g["platform"] == h["platform"]
        for k in ("inputs", "outputs"):
            assert [(t["name"], t["datatype"], [int(d) for d in t.get("shape", [])]) for t in g[k]] == \
                   [(t["name"], t["datatype"], t["shape"]) for t in h[k]], (m, k)
    code, msg = triton_status(lambda: client.get_model_metadata("nope"))
    assert code == "StatusCode.NOT_FOUND" and "nope" in msg


def test_model_config_of_every_loaded_model_matches_http(server, client):
    for m in MODELS:
        g = json_format.MessageToDict(client.get_model_config(m).config, preserving_proto_field_name=True)
        h = http_json(server, f"/v2/models/{m}/config")
        assert g["name"] == h["name"] == m
        assert g.get("backend", "") == h["backend"]
        assert int(g.get("max_batch_size", 0)) == h["max_batch_size"]
        for k in ("input", "output"):
            assert [(t["name"], t["data_type"], [int(d) for d in t.get("dims", [])]) for t in g.get(k, [])] == \
                   [(t["name"], t["data_type"], [int(d) for d in t["dims"]]) for t in h[k]], (m, k)
        assert ("dynamic_batching" in g) == ("dynamic_batching" in h), m
        assert [int(x.get("count", 0)) for x in g.get("instance_group", [])] == \
               [int(x["count"]) for x in h["instance_group"]], m
        if "model_transaction_policy" in h:
            assert g.get("model_transaction_policy", {}).get("decoupled", False) == \
                   h["model_transaction_policy"]["decoupled"]
        assert {k: v["string_value"] for k, v in g.get("parameters", {}).items()} == \
               {k: v["string_value"] for k, v in h.get("parameters", {}).items()}


# ---- inference --------------------------------------------------------------------------

def test_infer_raw_fp32_batch_and_outputs(client):
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    i = tg.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    r = client.infer("identity", [i], request_id="req-7", outputs=[tg.InferRequestedOutput("OUTPUT0")])
    assert np.array_equal(r.as_numpy("OUTPUT0"), x)
    resp = r.get_response()
    assert resp.id == "req-7" and resp.model_name == "identity" and resp.model_version == "1"


def test_infer_two_inputs_and_gzip_request(client):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = -a.astype(np.int32)
    ins = []
    for n, v in (("INPUT0", a), ("INPUT1", b)):
        i = tg.InferInput(n, list(v.shape), "FP32" if v.dtype == np.float32 else "INT32")
        i.set_data_from_numpy(v)
        ins.append(i)
    cfg = client.get_model_metadata("identity_pair", as_json=True)
    outs = [o["name"] for o in cfg["outputs"]]
    for comp in (None, "gzip", "deflate"):
        if comp == "deflate":
            code, msg = triton_status(lambda: client.infer("identity_pair", ins, compression_algorithm=comp))
            assert code == "StatusCode.UNIMPLEMENTED" and "deflate" in msg
            continue
        r = client.infer("identity_pair", ins, compression_algorithm=comp)
        got = [r.as_numpy(o) for o in outs]
        assert np.array_equal(got[0], a) and np.array_equal(got[1], b), comp


def test_infer_bytes_raw_and_typed(client, stub):
    s = np.array([[b"", b"hello"], [b"\x00\xffbin", "ünï".encode()]], dtype=np.object_)
    i = tg.InferInput("INPUT0", [2, 2], "BYTES")
    i.set_data_from_numpy(s)
    assert (client.infer("identity_string", [i]).as_numpy("OUTPUT0") == s).all()
    req = service_pb2.ModelInferRequest(model_name="identity_string")
    t = req.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 3])
    t.contents.bytes_contents.extend([b"a", b"", b"xyz"])
    raw = stub.ModelInfer(req).raw_output_contents[0]
    assert raw == b"\x01\x00\x00\x00a" + b"\x00\x00\x00\x00" + b"\x03\x00\x00\x00xyz"


TYPED = [  # model dtype, contents field, values, numpy dtype
    ("bool", "BOOL", "bool_contents", [True, False, True], np.bool_),
    ("int8", "INT8", "int_contents", [-128, 0, 127], np.int8),
    ("int16", "INT16", "int_contents", [-32768, 5, 32767], np.int16),
    ("int32", "INT32", "int_contents", [-2**31, 0, 2**31 - 1], np.int32),
    ("int64", "INT64", "int64_contents", [-2**63, 1, 2**63 - 1], np.int64),
    ("uint8", "UINT8", "uint_contents", [0, 1, 255], np.uint8),
    ("uint16", "UINT16", "uint_contents", [0, 1, 65535], np.uint16),
    ("uint32", "UINT32", "uint_contents", [0, 1, 2**32 - 1], np.uint32),
    ("uint64", "UINT64", "uint64_contents", [0, 1, 2**64 - 1], np.uint64),
    ("fp32", "FP32", "fp32_contents", [1.5, -0.0, 3e38], np.float32),
    ("fp64", "FP64", "fp64_contents", [1e-300, -2.5, 1e300], np.float64),
]


@pytest.mark.parametrize("suffix,dt,field,vals,npdt", TYPED, ids=[t[1] for t in TYPED])
def test_infer_typed_contents_every_dtype(stub, suffix, dt, field, vals, npdt):
    req = service_pb2.ModelInferRequest(model_name=f"identity_{suffix}")
    t = req.inputs.add(name="INPUT0", datatype=dt, shape=[1, 3])
    getattr(t.contents, field).extend(vals)
    resp = stub.ModelInfer(req)
    assert resp.outputs[0].datatype == dt and list(resp.outputs[0].shape) == [1, 3]
    assert np.frombuffer(resp.raw_output_contents[0], dtype=npdt).tolist() == np.array(vals, dtype=npdt).tolist()


def test_infer_errors_with_status_codes(client, stub):
    x = np.zeros((1, 4), dtype=np.float32)
    i = tg.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    code, msg = triton_status(lambda: client.infer("no_such_model", [i]))
    assert code == "StatusCode.NOT_FOUND" and "unknown model" in msg and "no_such_model" in msg
    wrong = tg.InferInput("INPUT0", [1, 4], "INT32")
    wrong.set_data_from_numpy(np.zeros((1, 4), dtype=np.int32))
    code, msg = triton_status(lambda: client.infer("identity_fp32", [wrong]))
    assert code == "StatusCode.INVALID_ARGUMENT" and "INT32" in msg and "FP32" in msg
    big = tg.InferInput("INPUT0", [9, 4], "FP32")
    big.set_data_from_numpy(np.zeros((9, 4), dtype=np.float32))
    code, msg = triton_status(lambda: client.infer("identity_fp32", [big]))
    assert code == "StatusCode.INVALID_ARGUMENT" and "batch size 9" in msg
    code, msg = triton_status(lambda: client.infer("identity_fp32", [i], model_version="7"))
    assert code == "StatusCode.NOT_FOUND" and "7" in msg
    code, msg = triton_status(lambda: client.infer("identity_fp32", [i], outputs=[tg.InferRequestedOutput("NOPE")]))
    assert code == "StatusCode.INVALID_ARGUMENT" and "NOPE" in msg

    def call(build):
        req = service_pb2.ModelInferRequest(model_name="identity_int8")
        build(req)
        return status_of(lambda: stub.ModelInfer(req))
    code, msg = call(lambda r: r.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 2]).contents.int_contents.extend([1, 300]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "300 is out of range for INT8" in msg
    code, msg = call(lambda r: r.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 3]).contents.int_contents.extend([1]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "1 elements but the shape needs 3" in msg
    code, msg = call(lambda r: r.inputs.add(name="INPUT0", datatype="TYPE_INT8", shape=[1]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "unknown datatype 'TYPE_INT8'" in msg
    code, msg = call(lambda r: r.inputs.add(name="INPUT0", datatype="INT8", shape=[1, -2]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "non-negative" in msg
    code, msg = call(lambda r: r.inputs.add(name="INPUT0", datatype="INT8", shape=[1] * 9))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "CINFER_MAX_DIMS" in msg
    code, msg = call(lambda r: [r.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 1]).contents.int_contents.append(1)
                                for _ in range(2)])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "more than once" in msg
    code, msg = call(lambda r: None)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "non-empty 'inputs'" in msg
    code, msg = call(lambda r: (r.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 2]),
                                r.raw_input_contents.append(b"\x01")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "INPUT0" in msg  # 1 byte for 2 elements
    code, msg = call(lambda r: (r.inputs.add(name="INPUT0", datatype="INT8", shape=[1, 1]),
                                r.inputs.add(name="INPUT1", datatype="INT8", shape=[1, 1]),
                                r.raw_input_contents.append(b"\x01")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in msg
    req = service_pb2.ModelInferRequest(model_name="identity_fp16")
    req.inputs.add(name="INPUT0", datatype="FP16", shape=[1, 1]).contents.fp32_contents.append(1.0)
    code, msg = status_of(lambda: stub.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "raw_input_contents" in msg
    req = service_pb2.ModelInferRequest(model_name=LLM)
    req.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"hi")
    code, msg = status_of(lambda: stub.ModelInfer(req))
    assert code == grpc.StatusCode.UNIMPLEMENTED and "decoupled" in msg
    req = service_pb2.ModelInferRequest(model_name="identity_fp32")
    req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1]).parameters["shared_memory_region"].string_param = "r"
    code, msg = status_of(lambda: stub.ModelInfer(req))
    assert code == grpc.StatusCode.NOT_FOUND and "Unable to find shared memory region: 'r'" in msg


def test_fp16_and_bf16_raw(client):
    x = np.array([[1.5, -2.25, 65504]], dtype=np.float16)
    i = tg.InferInput("INPUT0", [1, 3], "FP16")
    i.set_data_from_numpy(x)
    assert np.array_equal(client.infer("identity_fp16", [i]).as_numpy("OUTPUT0"), x)


def test_statistics_count_grpc_inferences(server, client):
    before = client.get_inference_statistics("identity_int32", as_json=True)["model_stats"][0]
    n0 = int(before.get("inference_count", 0))
    i = tg.InferInput("INPUT0", [2, 3], "INT32")
    i.set_data_from_numpy(np.ones((2, 3), dtype=np.int32))
    for _ in range(3):
        client.infer("identity_int32", [i])
    after = client.get_inference_statistics("identity_int32", as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) == n0 + 6
    assert int(after["inference_stats"]["success"]["count"]) >= 3
    h = http_json(server, "/v2/models/identity_int32/stats")["model_stats"][0]
    assert h["inference_count"] == int(after["inference_count"])
    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in every} == set(MODELS)
    code, msg = triton_status(lambda: client.get_inference_statistics("no_such_model"))
    assert code == "StatusCode.NOT_FOUND"


def test_repository_index_load_unload(server, client):
    idx = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
    h = {m["name"]: m for m in http_json(server, "/v2/repository/index", {})}
    assert idx.keys() == h.keys()
    assert idx["identity_fp32"]["state"] == "READY" and idx["identity_fp32"]["version"] == "1"
    ready = client.get_model_repository_index(as_json=True)
    assert {m["name"] for m in ready["models"] if m.get("state") == "READY"} >= set(MODELS)
    assert not client.is_model_ready("identity_uint8") or "identity_uint8" in MODELS
    client.unload_model("identity_uint8")
    assert not client.is_model_ready("identity_uint8")
    client.load_model("identity_uint8")
    assert client.is_model_ready("identity_uint8")
    code, msg = triton_status(lambda: client.load_model("no_such_model"))
    assert code == "StatusCode.NOT_FOUND" and "no_such_model" in msg
    code, msg = triton_status(lambda: client.load_model("identity_uint8", files={"file:1/model.onnx": b"x"}))
    assert code == "StatusCode.INVALID_ARGUMENT" and "'file:' parameters need a 'config' parameter" in msg
    # load with a configuration (Triton's load-with-config); a load without one keeps it
    # while the files are unchanged (Triton's test_config_override), an unload forgets it
    cfg = http_json(server, "/v2/models/identity_uint8/config")
    cfg["max_batch_size"] = 2
    client.load_model("identity_uint8", config=json.dumps(cfg))
    assert int(client.get_model_config("identity_uint8").config.max_batch_size) == 2
    client.load_model("identity_uint8")
    assert int(client.get_model_config("identity_uint8").config.max_batch_size) == 2
    client.unload_model("identity_uint8")
    client.load_model("identity_uint8")
    assert int(client.get_model_config("identity_uint8").config.max_batch_size) == 8


# ---- streaming ---------------------------------------------------------------------------

def test_stream_many_requests_and_errors_in_stream(server):
    c = tg.InferenceServerClient(server.grpc_url)
    q = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    sent = {}
    for k in range(20):
        x = np.full((1, 3), k, dtype=np.float32)
        i = tg.InferInput("INPUT0", [1, 3], "FP32")
        i.set_data_from_numpy(x)
        c.async_stream_infer("identity", [i], request_id=f"r{k}")
        sent[f"r{k}"] = x
    bad = tg.InferInput("INPUT0", [1, 3], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 3), dtype=np.int32))
    c.async_stream_infer("identity", [bad], request_id="bad")
    c.async_stream_infer("no_such_model", [bad], request_id="bad2")
    got, errors = {}, []
    for _ in range(22):
        r, e = q.get(timeout=60)
        if e is not None:
            errors.append(str(e))
        else:
            got[r.get_response().id] = r.as_numpy("OUTPUT0")
    c.stop_stream()
    assert got.keys() == sent.keys()
    for k, x in sent.items():
        assert np.array_equal(got[k], x)
    assert len(errors) == 2
    assert any("INT32" in e for e in errors) and any("no_such_model" in e for e in errors)
    unharmed(server)


def test_stream_llm_token_by_token_aio_matches_unary_http(server):
    """tritonclient.grpc.aio: the decoupled LLM streams one response per token; the stream
    ends (OK) once the client has half-closed and its request is done; the pieces add up to
    what the unary KServe HTTP call answers with the same greedy parameters."""
    prompt = "The capital of France is"
    params = {"max_tokens": 12, "temperature": 0.0}
    whole = http_json(server, f"/v2/models/{LLM}/infer",
                      {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": [prompt]}],
                       "parameters": params})
    text = whole["outputs"][0]["data"][0]

    async def run():
        async with tga.InferenceServerClient(server.grpc_url) as c:
            async def requests():
                i = tga.InferInput("text_input", [1], "BYTES")
                i.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
                yield {"model_name": LLM, "inputs": [i], "request_id": "llm-1",
                       "parameters": dict(params, stream=True)}
            pieces = []
            async for result, error in c.stream_infer(inputs_iterator=requests()):
                assert error is None, error
                assert result.get_response().id == "llm-1"
                out = result.as_numpy("text_output")
                assert out is not None and out.shape == (1,)
                pieces.append(out[0].decode())
            return pieces
    pieces = asyncio.run(run())
    assert len(pieces) >= 2, pieces  # token by token, not one answer
    assert "".join(pieces) == text


def test_stream_llm_empty_final_response_flag(server):
    """Triton's triton_enable_empty_final_response: every response says whether it is the
    last; the last one carries no outputs."""
    c = tg.InferenceServerClient(server.grpc_url)
    q = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    i = tg.InferInput("text_input", [1], "BYTES")
    i.set_data_from_numpy(np.array([b"Hello"], dtype=np.object_))
    c.async_stream_infer(LLM, [i], request_id="f", enable_empty_final_response=True,
                         parameters={"stream": True, "max_tokens": 5, "temperature": 0.0})
    finals, outs = [], []
    while not finals or not finals[-1]:
        r, e = q.get(timeout=60)
        assert e is None, e
        finals.append(r.get_response().parameters["triton_final_response"].bool_param)
        outs.append(len(r.get_response().outputs))
    c.stop_stream()
    assert len(finals) >= 2 and not any(finals[:-1])
    assert outs[-1] == 0 and all(outs[:-1])


def llm_running(server):
    text = urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(f'cinfer_llm_running_sequences{{model="{LLM}"}}'):
            return float(line.split()[-1])
    return None


def wait_for(cond, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_cancelling_the_stream_cancels_its_requests(server):
    def fails():
        s = http_json(server, f"/v2/models/{LLM}/stats")["model_stats"][0]["inference_stats"]
        return s["fail"]["count"]
    fail0 = fails()
    c = tg.InferenceServerClient(server.grpc_url)
    q = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    i = tg.InferInput("text_input", [1], "BYTES")
    i.set_data_from_numpy(np.array([b"Write a very long story about dragons."], dtype=np.object_))
    c.async_stream_infer(LLM, [i], parameters={"stream": True, "max_tokens": 1500, "ignore_eos": True,
                                               "temperature": 0.8})
    try:
        r, e = q.get(timeout=60)  # generation has started
        assert e is None
        assert llm_running(server) >= 1
    finally:
        c.stop_stream(cancel_requests=True)  # RST_STREAM (also when an assertion failed)
    assert wait_for(lambda: llm_running(server) == 0)
    assert wait_for(lambda: fails() == fail0 + 1)
    unharmed(server)


# ---- bad input at the HTTP/2 and message level --------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, sid, payload):
    return len(payload).to_bytes(3, "big") + bytes([ftype, flags]) + sid.to_bytes(4, "big") + payload


def lit(name, value):  # HPACK literal header field without indexing, new name
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def req_headers(path):
    return (lit(b":method", b"POST") + lit(b":scheme", b"http") + lit(b":path", path) +
            lit(b":authority", b"x") + lit(b"content-type", b"application/grpc") + lit(b"te", b"trailers"))


def read_frames(sock, until, timeout=30):
    """Frames (type, flags, stream, payload) until until(frames) or EOF."""
    sock.settimeout(timeout)
    buf, frames = b"", []
    while not until(frames):
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            frames.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]))
            buf = buf[9 + n:]
    return frames


LIVE = b"/inference.GRPCInferenceService/ServerLive"


def test_stream_reset_mid_request_then_same_connection_works(server):
    s = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=30)
    s.sendall(PREFACE + frame(4, 0, 0, b""))
    # stream 1: a ModelInfer whose message announces 1000 bytes, 10 sent, then RST_STREAM
    s.sendall(frame(1, 4, 1, req_headers(b"/inference.GRPCInferenceService/ModelInfer")) +
              frame(0, 0, 1, b"\x00\x00\x00\x03\xe8" + b"\x0a" * 10) + frame(3, 0, 1, (8).to_bytes(4, "big")))
    # stream 3 on the same connection: a whole ServerLive call
    s.sendall(frame(1, 4, 3, req_headers(LIVE)) + frame(0, 1, 3, b"\x00\x00\x00\x00\x00"))
    frames = read_frames(s, lambda fs: any(f[2] == 3 and f[1] & 1 for f in fs))
    data = b"".join(f[3] for f in frames if f[0] == 0 and f[2] == 3)
    assert data == b"\x00\x00\x00\x00\x02\x08\x01"  # ServerLiveResponse{live: true}
    assert not any(f[2] == 1 and f[0] in (0, 1) for f in frames)  # nothing answered the reset stream
    s.close()
    unharmed(server)


def test_unary_call_with_two_messages_is_answered_at_once(server):
    """A unary call whose DATA holds a second message is refused as soon as it arrives (the
    server never buffers past the one message it needs), and the connection stays usable."""
    s = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=30)
    msg = b"\x00\x00\x00\x00\x00"
    s.sendall(PREFACE + frame(4, 0, 0, b"") + frame(1, 4, 1, req_headers(LIVE)) + frame(0, 0, 1, msg + msg))
    frames = read_frames(s, lambda fs: any(f[2] == 1 and f[0] == 1 and f[1] & 1 for f in fs))
    assert any(f[2] == 1 and f[0] == 1 and f[1] & 1 for f in frames)  # trailers-only, no END_STREAM from us yet
    assert not any(f[2] == 1 and f[0] == 0 for f in frames)           # and no response message
    s.sendall(frame(1, 4, 3, req_headers(LIVE)) + frame(0, 1, 3, msg))
    frames = read_frames(s, lambda fs: any(f[2] == 3 and f[1] & 1 for f in fs))
    assert b"".join(f[3] for f in frames if f[0] == 0 and f[2] == 3) == b"\x00\x00\x00\x00\x02\x08\x01"
    s.close()


@pytest.mark.parametrize("bad", ["garbage", "data_on_stream_0", "oversized_frame", "no_preface"])
def test_protocol_errors_close_only_that_connection(server, bad):
    s = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=30)
    if bad == "no_preface":
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    else:
        s.sendall(PREFACE + frame(4, 0, 0, b""))
        if bad == "garbage":
            s.sendall(b"\xff" * 64)
        elif bad == "data_on_stream_0":
            s.sendall(frame(0, 0, 0, b"abc"))
        else:  # larger than SETTINGS_MAX_FRAME_SIZE (16384)
            s.sendall(frame(1, 4, 1, req_headers(LIVE)) + frame(0, 0, 1, b"\x00" * 20000))
    frames = read_frames(s, lambda fs: any(f[0] == 7 for f in fs))
    if bad != "no_preface":
        assert any(f[0] == 7 for f in frames), frames  # GOAWAY
    assert s.recv(1) == b""  # then closed
    s.close()
    unharmed(server)


def test_malformed_protobuf_and_message_limits(server):
    ch = grpc.insecure_channel(server.grpc_url, options=[("grpc.max_receive_message_length", -1)])
    infer = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=lambda b: b,
                           response_deserializer=lambda b: b)
    for junk in (b"\xff\xff\xff\xff", b"\x0a\x80", b"\x2a\x05\x0a\x01"):
        code, msg = status_of(lambda: infer(junk, timeout=30))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "not valid protobuf" in msg
    code, msg = status_of(lambda: infer(b"\x00" * (9 << 20), timeout=60))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in msg
    unknown = ch.unary_unary("/inference.GRPCInferenceService/Nope", request_serializer=lambda b: b,
                             response_deserializer=lambda b: b)
    code, msg = status_of(lambda: unknown(b"", timeout=30))
    assert code == grpc.StatusCode.UNIMPLEMENTED and "Nope" in msg
    ch.close()
    unharmed(server)


def test_message_just_under_the_limit_is_served(client):
    x = np.ones((1, (8 << 20) // 4 - 1024), dtype=np.float32)
    i = tg.InferInput("INPUT0", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    assert np.array_equal(client.infer("identity", [i]).as_numpy("OUTPUT0"), x)


# ---- perf_analyzer -------------------------------------------------------------------------

@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_perf_analyzer_grpc(server, streaming):
    pa = perf_analyzer_bin()
    assert pa, "perf_analyzer is not installed in the venv (scripts/setup.sh installs it)"
    cmd = [pa, "-m", "identity", "-u", server.grpc_url, "-i", "grpc", "--shape", "INPUT0:16",
           "--concurrency-range", "1:8:7", "--measurement-mode", "count_windows",
           "--measurement-request-count", "200", "--stability-percentage", "10000",
           "--max-trials", "4", "-v"] + (["--streaming"] if streaming else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=perf_analyzer_env())
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Concurrency: 1," in out and "Concurrency: 8," in out, out
    assert "Server:" in out and "Inference count:" in out, out
    assert "error" not in out.lower().replace("error rate", ""), out
