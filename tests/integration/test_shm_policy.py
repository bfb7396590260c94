"""The server's shared-memory policy (issue "Security"): with --shared-memory-key-prefix and
--shared-memory-max-bytes a client registers only the POSIX objects meant for it, and no
more than the limit, over HTTP and gRPC alike (one registry); a refused registration maps
nothing and the server keeps serving."""
import os

import numpy as np
import pytest
import tritonclient.grpc as tg
import tritonclient.http as th
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from cinfer_server import Server, copy_repo

PREFIX = f"cinfer_tenant_{os.getpid()}_"


@pytest.fixture(scope="module")
def server():
    args = ["--shared-memory-key-prefix", PREFIX, "--shared-memory-max-bytes", "4096"]
    with Server(copy_repo(["identity"]), args=args) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def regions():
    made = []

    def make(key, size):
        h = shm.create_shared_memory_region(key, "/" + key, size)
        made.append(h)
        return h
    yield make
    for h in made:
        shm.destroy_shared_memory_region(h)


def clients(server):
    return (th.InferenceServerClient(f"127.0.0.1:{server.port}"),
            tg.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"))


def test_only_keys_under_the_prefix(server, regions):
    regions(PREFIX + "ok", 64)
    regions("someone_else_" + str(os.getpid()), 64)
    for c in clients(server):
        c.register_system_shared_memory("mine", "/" + PREFIX + "ok", 64)
        with pytest.raises(InferenceServerException) as e:
            c.register_system_shared_memory("theirs", "/someone_else_" + str(os.getpid()), 64)
        assert "does not start with the prefix" in str(e.value) and PREFIX in str(e.value)
        status = c.get_system_shared_memory_status()
        names = [r["name"] for r in status] if isinstance(status, list) else \
            [r.name for r in status.regions.values()]  # HTTP: a list; gRPC: the message
        assert names == ["mine"], names
        c.unregister_system_shared_memory()


def test_regions_within_the_size_limit(server, regions):
    regions(PREFIX + "big", 8192)
    h, g = clients(server)
    h.register_system_shared_memory("fits", "/" + PREFIX + "big", 4096)
    for c in (h, g):
        with pytest.raises(InferenceServerException) as e:
            c.register_system_shared_memory("too_big", "/" + PREFIX + "big", 4097)
        assert "4097 bytes is more than the 4096" in str(e.value)
    # the region that fits works for inference; the server is unharmed
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inp = th.InferInput("INPUT0", [1, 16], "FP32")
    inp.set_data_from_numpy(data)
    r = h.infer("identity", [inp])
    assert np.array_equal(r.as_numpy("OUTPUT0"), data)
    h.unregister_system_shared_memory()
