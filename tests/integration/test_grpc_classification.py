"""Triton's classification extension over gRPC (tritonclient.grpc's class_count): the same
"value:index[:label]" BYTES strings as over HTTP, unary and streaming, and the same errors.
Written for Triton's grpc_image_client.py, which asks for it."""
import queue

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo
from test_kserve_ext import CLASSIFIER, LABELS, add_model


@pytest.fixture(scope="module")
def server():
    repo = copy_repo(["identity", "identity_string"])
    add_model(repo, "classifier", CLASSIFIER, [("labels.txt", "\n".join(LABELS) + "\n")])
    with Server(repo) as s:
        s.wait_ready()
        s.grpc_url = f"127.0.0.1:{s.grpc_port}"
        yield s


X = np.array([[0.1, 0.7, 0.15, 0.05], [3, 1, 4, 2]], np.float32)
WANT = [[b"0.700000:1:dog", b"0.150000:2:bird", b"0.100000:0:cat"],
        [b"4.000000:2:bird", b"3.000000:0:cat", b"2.000000:3:fish"]]


def grpc_input(x, dt="FP32"):
    i = tg.InferInput("INPUT0", list(x.shape), dt)
    i.set_data_from_numpy(x)
    return i


def test_unary_classification_matches_http(server):
    c = tg.InferenceServerClient(server.grpc_url)
    r = c.infer("classifier", [grpc_input(X)], outputs=[tg.InferRequestedOutput("OUTPUT0", class_count=3)])
    out = r.get_output("OUTPUT0")
    assert out.datatype == "BYTES" and list(out.shape) == [2, 3]
    assert r.as_numpy("OUTPUT0").tolist() == WANT
    h = th.InferenceServerClient(server.hostport)
    hi = th.InferInput("INPUT0", [2, 4], "FP32")
    hi.set_data_from_numpy(X)
    hr = h.infer("classifier", [hi], outputs=[th.InferRequestedOutput("OUTPUT0", class_count=3, binary_data=True)])
    assert hr.as_numpy("OUTPUT0").tolist() == r.as_numpy("OUTPUT0").tolist()
    # no label file, K above the row: clipped, "value:index"
    r = c.infer("identity", [grpc_input(np.array([[5, 9, 1]], np.float32))],
                outputs=[tg.InferRequestedOutput("OUTPUT0", class_count=10)])
    assert r.as_numpy("OUTPUT0").tolist() == [[b"9.000000:1", b"5.000000:0", b"1.000000:2"]]
    # an output not asked to classify comes back as the tensor
    r = c.infer("identity", [grpc_input(X)], outputs=[tg.InferRequestedOutput("OUTPUT0")])
    assert np.array_equal(r.as_numpy("OUTPUT0"), X)
    c.close()


def test_streaming_classification(server):
    c = tg.InferenceServerClient(server.grpc_url)
    q = queue.Queue()
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    for k in range(2):  # the same call object classifies every response afresh
        c.async_stream_infer("classifier", [grpc_input(X)], request_id=str(k),
                             outputs=[tg.InferRequestedOutput("OUTPUT0", class_count=3)])
        r, e = q.get(timeout=60)
        assert e is None, e
        assert r.as_numpy("OUTPUT0").tolist() == WANT
    c.stop_stream()
    c.close()


def test_classification_errors(server):
    c = tg.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as e:
        c.infer("identity_string", [grpc_input(np.array([[b"a", b"b"]], np.object_), "BYTES")],
                outputs=[tg.InferRequestedOutput("OUTPUT0", class_count=1)])
    assert "class result not available for output due to unsupported type 'BYTES'" in e.value.message()
    # a classification parameter that is not a positive int64 (tritonclient always sends one:
    # made by hand here)
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    import grpc
    ch = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
    req = service_pb2.ModelInferRequest(model_name="identity")
    t = req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 1])
    req.raw_input_contents.append(np.ones(1, np.float32).tobytes())
    o = req.outputs.add(name="OUTPUT0")
    o.parameters["classification"].string_param = "two"
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "parameter 'classification' must be a positive int64_param" in e.value.details()
    o.parameters["classification"].int64_param = 0
    with pytest.raises(grpc.RpcError) as e:
        stub.ModelInfer(req, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ch.close()
    assert c.is_server_live()
    c.close()
