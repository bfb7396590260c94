"""System shared memory over gRPC against the real binary, with tritonclient.grpc and
tritonclient.utils.shared_memory (POSIX objects): the SystemSharedMemory RPCs on the one
registry the HTTP endpoint uses too (registered on one, seen and used on the other),
ModelInfer / ModelStreamInfer inputs read from and outputs written to regions, and the
HTTP endpoint's checks and texts for bad regions, offsets and sizes (INVALID_ARGUMENT or
NOT_FOUND with the message), the server unharmed. CUDA shared memory answers as over
HTTP (no GPU)."""
import os
import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo


@pytest.fixture(scope="module")
def server():
    repo = copy_repo(["identity", "identity_string", "identity_int64"])
    with Server(repo) as s:
        s.wait_ready()
        assert s.grpc_port
        s.grpc_url = f"127.0.0.1:{s.grpc_port}"
        yield s


@pytest.fixture
def client(server):
    c = tg.InferenceServerClient(server.grpc_url)
    c.unregister_system_shared_memory()
    yield c
    c.unregister_system_shared_memory()
    c.close()


@pytest.fixture
def hclient(server):
    c = th.InferenceServerClient(server.hostport)
    yield c
    c.close()


class Region:
    """A client-side POSIX shared-memory object (tritonclient's helper)."""

    def __init__(self, name, size):
        self.name, self.key, self.size = name, f"/cinfer_g_{name}_{os.getpid()}", size
        self.h = shm.create_shared_memory_region(name, self.key, size)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shm.destroy_shared_memory_region(self.h)


def grpc_error(fn):
    with pytest.raises(InferenceServerException) as e:
        fn()
    return e.value.status(), e.value.message()


def regions_of(status):
    """{name: (key, offset, byte_size)} from a SystemSharedMemoryStatusResponse."""
    return {n: (r.key, int(r.offset), int(r.byte_size)) for n, r in status.regions.items()}


def unharmed(server):
    c = tg.InferenceServerClient(server.grpc_url)
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    i = tg.InferInput("INPUT0", [1, 4], "FP32")
    i.set_data_from_numpy(x)
    assert np.array_equal(c.infer("identity", [i]).as_numpy("OUTPUT0"), x)


def test_one_registry_for_grpc_and_http(server, client, hclient):
    with Region("a", 1024) as a, Region("b", 64) as b:
        client.register_system_shared_memory("a", a.key, 512, offset=256)
        assert regions_of(client.get_system_shared_memory_status()) == {"a": (a.key, 256, 512)}
        # registered over gRPC: listed over HTTP
        assert hclient.get_system_shared_memory_status() == [
            {"name": "a", "key": a.key, "offset": 256, "byte_size": 512}]
        # registered over HTTP: listed over gRPC, by name too
        hclient.register_system_shared_memory("b", b.key, 64)
        assert regions_of(client.get_system_shared_memory_status()) == {
            "a": (a.key, 256, 512), "b": (b.key, 0, 64)}
        assert regions_of(client.get_system_shared_memory_status("b")) == {"b": (b.key, 0, 64)}
        # the same name cannot be registered twice, whichever endpoint tries
        code, msg = grpc_error(lambda: client.register_system_shared_memory("b", b.key, 64))
        assert code == "StatusCode.INVALID_ARGUMENT" and "shared memory region 'b' already in manager" in msg
        # unregistered over gRPC: gone over HTTP
        client.unregister_system_shared_memory("a")
        assert [r["name"] for r in hclient.get_system_shared_memory_status()] == ["b"]
        client.unregister_system_shared_memory("never-registered")  # not an error, as Triton
        client.unregister_system_shared_memory()
        assert hclient.get_system_shared_memory_status() == []
        assert regions_of(client.get_system_shared_memory_status()) == {}


def test_register_errors_have_the_http_texts(server, client, hclient):
    with Region("r", 128) as r:
        cases = [
            (lambda c: c.register_system_shared_memory("r", "/cinfer_no_such_key", 64),
             "Unable to open shared memory region: '/cinfer_no_such_key'"),
            (lambda c: c.register_system_shared_memory("r", r.key, 64, offset=100),
             "failed to register shared memory region 'r': invalid args"),
            (lambda c: c.register_system_shared_memory("r", "///", 64),
             "invalid shm key '///'"),
        ]
        for fn, text in cases:
            code, msg = grpc_error(lambda: fn(client))
            assert code == "StatusCode.INVALID_ARGUMENT" and text in msg, (code, msg)
            with pytest.raises(InferenceServerException) as e:
                fn(hclient)
            assert e.value.status() == "400" and text in e.value.message()
        code, msg = grpc_error(lambda: client.get_system_shared_memory_status("nope"))
        assert code == "StatusCode.NOT_FOUND" and "Unable to find system shared memory region: 'nope'" in msg
        assert regions_of(client.get_system_shared_memory_status()) == {}
    unharmed(server)


def test_infer_inputs_and_outputs_in_regions(server, client, hclient):
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    with Region("in", x.nbytes + 64) as ri, Region("out", x.nbytes + 64) as ro:
        shm.set_shared_memory_region(ri.h, [x], offset=64)
        client.register_system_shared_memory("in", ri.key, x.nbytes, offset=64)
        hclient.register_system_shared_memory("out", ro.key, x.nbytes + 64)  # over HTTP
        i = tg.InferInput("INPUT0", list(x.shape), "FP32")
        i.set_shared_memory("in", x.nbytes)
        o = tg.InferRequestedOutput("OUTPUT0")
        o.set_shared_memory("out", x.nbytes, offset=32)
        res = client.infer("identity", [i], outputs=[o])
        out = res.get_output("OUTPUT0")
        assert out.datatype == "FP32" and list(out.shape) == [2, 8]
        # the bytes are in the region, not in the response
        assert res.get_response().raw_output_contents[0] == b""
        got = shm.get_contents_as_numpy(ro.h, np.float32, [2, 8], offset=32)
        assert np.array_equal(got, x)
        # a shm input with an output in the response, and the reverse
        res = client.infer("identity", [i])
        assert np.array_equal(res.as_numpy("OUTPUT0"), x)
        y = -x
        j = tg.InferInput("INPUT0", list(y.shape), "FP32")
        j.set_data_from_numpy(y)
        client.infer("identity", [j], outputs=[o])
        assert np.array_equal(shm.get_contents_as_numpy(ro.h, np.float32, [2, 8], offset=32), y)


def test_shm_input_beside_raw_inputs(server, client):
    """tritonclient sends raw_input_contents only for the inputs not in shared memory."""
    a = np.arange(3, dtype=np.int64).reshape(1, 3)
    with Region("s", 64) as r:
        shm.set_shared_memory_region(r.h, [a])
        client.register_system_shared_memory("s", r.key, a.nbytes)
        i = tg.InferInput("INPUT0", [1, 3], "INT64")
        i.set_shared_memory("s", a.nbytes)
        res = client.infer("identity_int64", [i])
        assert np.array_equal(res.as_numpy("OUTPUT0"), a)
        assert len(res.get_response().raw_output_contents) == 1


def test_bytes_input_in_region(server, client):
    from tritonclient.utils import serialize_byte_tensor
    x = np.array([[b"one", b"", b"three \x00 four"]], dtype=np.object_)
    ser = serialize_byte_tensor(x)
    n = len(ser.item())
    with Region("str", n) as r:
        shm.set_shared_memory_region(r.h, [ser])
        client.register_system_shared_memory("str", r.key, n)
        i = tg.InferInput("INPUT0", [1, 3], "BYTES")
        i.set_shared_memory("str", n)
        res = client.infer("identity_string", [i])
        assert res.as_numpy("OUTPUT0").tolist() == x.tolist()


def test_stream_infer_with_regions(server, client):
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    with Region("sin", x.nbytes) as ri, Region("sout", x.nbytes) as ro:
        shm.set_shared_memory_region(ri.h, [x])
        client.register_system_shared_memory("sin", ri.key, x.nbytes)
        client.register_system_shared_memory("sout", ro.key, x.nbytes)
        results = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            i = tg.InferInput("INPUT0", [1, 8], "FP32")
            i.set_shared_memory("sin", x.nbytes)
            o = tg.InferRequestedOutput("OUTPUT0")
            o.set_shared_memory("sout", x.nbytes)
            client.async_stream_infer("identity", [i], outputs=[o], request_id="ok")
            r, e = results.get(timeout=60)
            assert e is None and r.get_response().id == "ok"
            assert np.array_equal(shm.get_contents_as_numpy(ro.h, np.float32, [1, 8]), x)
            # an error in the stream names the problem; the stream goes on
            o.set_shared_memory("sout", x.nbytes - 4)
            client.async_stream_infer("identity", [i], outputs=[o], request_id="small")
            r, e = results.get(timeout=60)
            assert e is not None and "should be at least 32 bytes to hold the results" in str(e)
            i.set_shared_memory("missing", x.nbytes)
            client.async_stream_infer("identity", [i], request_id="missing")
            r, e = results.get(timeout=60)
            assert e is not None and "Unable to find shared memory region: 'missing'" in str(e)
        finally:
            client.stop_stream()


def test_bad_offsets_and_sizes(server, client, hclient):
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    with Region("w", 64) as r:
        shm.set_shared_memory_region(r.h, [x])
        client.register_system_shared_memory("w", r.key, 64)

        def infer_in(offset, size, shape=(1, 8)):
            i = tg.InferInput("INPUT0", list(shape), "FP32")
            i.set_shared_memory("w", size, offset=offset)
            return lambda: client.infer("identity", [i])

        def infer_out(offset, size):
            i = tg.InferInput("INPUT0", [1, 8], "FP32")
            i.set_data_from_numpy(x)
            o = tg.InferRequestedOutput("OUTPUT0")
            o.set_shared_memory("w", size, offset=offset)
            return lambda: client.infer("identity", [i], outputs=[o])

        cases = [
            (infer_in(64, 32), "Invalid offset for shared memory region: 'w'"),
            (infer_in(48, 32), "Invalid offset + byte size for shared memory region: 'w'"),
            (infer_in(0, 16), "input byte size mismatch for input 'INPUT0' for model 'identity'. "
                              "Expected 32, got 16"),
            (infer_out(100, 8), "Invalid offset for shared memory region: 'w'"),
            (infer_out(40, 32), "Invalid offset + byte size for shared memory region: 'w'"),
            (infer_out(0, 16), "shared memory size specified with the request for output 'OUTPUT0' "
                               "(16 bytes) should be at least 32 bytes to hold the results"),
        ]
        for fn, text in cases:
            code, msg = grpc_error(fn)
            assert code == "StatusCode.INVALID_ARGUMENT" and text in msg, (code, msg, text)
        # the HTTP endpoint says the same for the same request
        hi = th.InferInput("INPUT0", [1, 8], "FP32")
        hi.set_shared_memory("w", 32, offset=48)
        with pytest.raises(InferenceServerException) as e:
            hclient.infer("identity", [hi])
        assert "Invalid offset + byte size for shared memory region: 'w'" in e.value.message()
        code, msg = grpc_error(lambda: client.infer("identity", [_shm_input("nope", 32)]))
        assert code == "StatusCode.NOT_FOUND" and "Unable to find shared memory region: 'nope'" in msg
    unharmed(server)


def _shm_input(region, size, offset=0):
    i = tg.InferInput("INPUT0", [1, 8], "FP32")
    i.set_shared_memory(region, size, offset=offset)
    return i


def test_parameter_types_as_triton(server, client):
    """Triton's ParseSharedMemoryParams rules for hand-made requests."""
    ch = grpc.insecure_channel(server.grpc_url)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
    with Region("p", 64) as r:
        client.register_system_shared_memory("p", r.key, 64)

        def call(edit):
            req = service_pb2.ModelInferRequest(model_name="identity")
            t = req.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 8])
            edit(req, t)
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(req)
            return e.value.code(), e.value.details()

        def region_not_string(q, t):
            t.parameters["shared_memory_region"].int64_param = 1
        code, msg = call(region_not_string)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "expected string_param" in msg
        code, msg = call(lambda q, t: t.parameters["shared_memory_offset"].MergeFrom(
            service_pb2.InferParameter(int64_param=0)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and \
            "'shared_memory_offset' can not be specified without 'shared_memory_region'" in msg

        def negative(q, t):
            t.parameters["shared_memory_region"].string_param = "p"
            t.parameters["shared_memory_byte_size"].int64_param = -1
        code, msg = call(negative)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and \
            "Unable to parse 'shared_memory_byte_size': must be a non-negative integer" in msg

        def with_contents(q, t):
            t.parameters["shared_memory_region"].string_param = "p"
            t.parameters["shared_memory_byte_size"].int64_param = 32
            t.contents.fp32_contents.extend([0.0] * 8)
        code, msg = call(with_contents)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "unexpected 'content' provided" in msg
    ch.close()
    unharmed(server)


def test_unregister_then_register_again(server, client):
    """Unregistering a region that a finished request used leaves nothing dangling: the next
    request naming it is NOT_FOUND, a new registration under the name works. (A region
    unregistered while a request uses it is test_shm.py's case, on the same registry.)"""
    x = np.ones((1, 8), dtype=np.float32)
    with Region("u", 32) as r:
        shm.set_shared_memory_region(r.h, [x])
        client.register_system_shared_memory("u", r.key, 32)
        assert np.array_equal(client.infer("identity", [_shm_input("u", 32)]).as_numpy("OUTPUT0"), x)
        client.unregister_system_shared_memory("u")
        code, msg = grpc_error(lambda: client.infer("identity", [_shm_input("u", 32)]))
        assert code == "StatusCode.NOT_FOUND"
        client.register_system_shared_memory("u", r.key, 32)
        assert np.array_equal(client.infer("identity", [_shm_input("u", 32)]).as_numpy("OUTPUT0"), x)


def test_cuda_shared_memory_answers_as_http(server, client, hclient):
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    code, msg = grpc_error(lambda: client.get_cuda_shared_memory_status("g"))
    assert code == "StatusCode.NOT_FOUND" and "Unable to find cuda shared memory region: 'g'" in msg
    code, msg = grpc_error(lambda: client.register_cuda_shared_memory("g", b"\0" * 64, 0, 64))
    assert code == "StatusCode.INVALID_ARGUMENT" and "GPUs not supported" in msg
    with pytest.raises(InferenceServerException) as e:
        hclient.register_cuda_shared_memory("g", b"\0" * 64, 0, 64)
    assert msg in e.value.message() or e.value.message() in msg
    client.unregister_cuda_shared_memory()  # none registered: success
    code, msg = grpc_error(lambda: client.unregister_cuda_shared_memory("g"))
    assert code == "StatusCode.INVALID_ARGUMENT" and "GPUs not supported" in msg
