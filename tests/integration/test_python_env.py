"""EXECUTION_ENV_PATH: a Python model run in a packed execution environment (Triton's
conda-pack style .tar.gz holding bin/python3 and its site-packages), unpacked once into a
cache folder, or an unpacked environment folder; `$$TRITON_MODEL_DIRECTORY` replaced by the
model's folder as on Triton. The environments here are virtual environments made by the
test with an extra module in their site-packages (and a .pth naming where numpy is), so
the model can import that module only when it runs in the environment. Bad archives and
paths fail the load with the parameter named."""
import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap

import numpy as np
import pytest
import tritonclient.http as httpclient

from cinfer_server import Server

CONFIG = """
name: "{name}"
backend: "python"
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "WHERE" data_type: TYPE_STRING dims: [ 2 ] }} ]
{params}
"""

PROBE_PY = """
import sys
import numpy as np
import cinfer_env_probe
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("WHERE", np.array(
            [cinfer_env_probe.MARK.encode(), sys.prefix.encode()], dtype=np.object_))])
            for r in requests]
"""


def make_env(root, mark):
    """A venv of this interpreter's base Python, with cinfer_env_probe.MARK = mark in its
    site-packages and a .pth to the folder numpy comes from."""
    subprocess.check_call([sys.executable, "-m", "venv", "--without-pip", root])
    site = glob.glob(os.path.join(root, "lib", "python3*", "site-packages"))
    assert len(site) == 1, site
    with open(os.path.join(site[0], "cinfer_env_probe.py"), "w") as f:
        f.write(f"MARK = {mark!r}\n")
    with open(os.path.join(site[0], "numpy_from_outside.pth"), "w") as f:
        f.write(os.path.dirname(os.path.dirname(np.__file__)) + "\n")
    return root


def pack(src, archive):
    with tarfile.open(archive, "w:gz") as t:
        for name in os.listdir(src):
            t.add(os.path.join(src, name), arcname=name)


def write_model(repo, name, params, py=PROBE_PY):
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(CONFIG.format(name=name, params=params))
    with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
        f.write(textwrap.dedent(py))
    return os.path.join(repo, name)


def env_param(value):
    return f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{value}" }} }}'


@pytest.fixture(scope="module")
def setup():
    work = tempfile.mkdtemp(prefix="cinfer-pyenv-")
    repo = os.path.join(work, "repo")
    cache = os.path.join(work, "cache")
    env = make_env(os.path.join(work, "env_src"), "from the packed env")
    # two models share one archive (in the first one's folder); one has it unpacked
    m1 = write_model(repo, "packed", env_param("$$TRITON_MODEL_DIRECTORY/env.tar.gz"))
    pack(env, os.path.join(m1, "env.tar.gz"))
    write_model(repo, "packed_too", env_param(os.path.join(m1, "env.tar.gz")))
    m3 = write_model(repo, "unpacked", env_param("$$TRITON_MODEL_DIRECTORY/python3"))
    make_env(os.path.join(m3, "python3"), "from the unpacked env")
    write_model(repo, "no_env", "")  # the module is not importable outside the envs
    write_model(repo, "missing", env_param("$$TRITON_MODEL_DIRECTORY/nothing.tar.gz"))
    m = write_model(repo, "corrupt", env_param("$$TRITON_MODEL_DIRECTORY/env.tar.gz"))
    with open(os.path.join(m, "env.tar.gz"), "wb") as f:
        f.write(b"this is not a gzip stream" * 40)
    m = write_model(repo, "no_python", env_param("$$TRITON_MODEL_DIRECTORY/env.tar.gz"))
    os.makedirs(os.path.join(work, "empty", "lib"))
    pack(os.path.join(work, "empty"), os.path.join(m, "env.tar.gz"))
    write_model(repo, "both", env_param(os.path.join(m1, "env.tar.gz")) +
                '\nparameters { key: "python_executable" value: { string_value: "/usr/bin/python3" } }')
    old = os.environ.get("CINFER_PYTHON_ENV_CACHE")
    os.environ["CINFER_PYTHON_ENV_CACHE"] = cache
    os.environ["CINFER_PYTHON"] = sys.executable
    try:
        with Server(repo, ["--strict-readiness", "false"]) as s:
            s.wait_ready()
            yield s, cache, m1
    finally:
        if old is None:
            os.environ.pop("CINFER_PYTHON_ENV_CACHE", None)
        else:
            os.environ["CINFER_PYTHON_ENV_CACHE"] = old
        shutil.rmtree(work)


def where(server, model):
    with httpclient.InferenceServerClient(server.hostport) as c:
        i = httpclient.InferInput("X", [1], "INT32")
        i.set_data_from_numpy(np.array([1], dtype=np.int32))
        out = c.infer(model, [i]).as_numpy("WHERE")
    return [x.decode() for x in out]


def reasons(server):
    with httpclient.InferenceServerClient(server.hostport) as c:
        return {e["name"]: (e.get("state"), e.get("reason", "")) for e in c.get_model_repository_index()}


def test_packed_env_is_unpacked_once_and_runs_the_model(setup):
    server, cache, _ = setup
    mark, prefix = where(server, "packed")
    assert mark == "from the packed env"
    unpacked = [d for d in os.listdir(cache) if ".tmp" not in d]
    assert len(unpacked) == 1 and unpacked[0].startswith("env.tar.gz-"), os.listdir(cache)
    assert os.path.realpath(prefix) == os.path.realpath(os.path.join(cache, unpacked[0]))
    mark2, prefix2 = where(server, "packed_too")  # the same archive: the same unpacked folder
    assert mark2 == mark and prefix2 == prefix
    assert os.listdir(cache) == unpacked  # no second copy, no leftover temporary folder


def test_unpacked_env_folder_with_model_directory_variable(setup):
    server, _, _ = setup
    mark, prefix = where(server, "unpacked")
    assert mark == "from the unpacked env"
    assert prefix.endswith(os.path.join("unpacked", "python3"))


def test_without_the_env_the_module_is_not_there(setup):
    server, _, _ = setup
    state, reason = reasons(server)["no_env"]
    assert state == "UNAVAILABLE" and "No module named 'cinfer_env_probe'" in reason


@pytest.mark.parametrize("model,text", [
    ("missing", "nothing.tar.gz': No such file or directory"),
    ("corrupt", "could not be unpacked"),
    ("no_python", "has no executable bin/python3"),
    ("both", "EXECUTION_ENV_PATH and python_executable both name an interpreter"),
])
def test_bad_environments_fail_the_load_naming_the_parameter(setup, model, text):
    server, cache, _ = setup
    state, reason = reasons(server)[model]
    assert state == "UNAVAILABLE", reason
    assert "EXECUTION_ENV_PATH" in reason and text in reason, reason
    assert not [d for d in os.listdir(cache) if ".tmp" in d]  # failed unpacks are removed
    assert where(server, "packed")[0] == "from the packed env"  # others unharmed
