"""Triton's server flags that a user moving from tritonserver passes as they are:
--exit-on-error, --allow-grpc, --http-thread-count, and the values of --allow-http,
--allow-metrics and --strict-model-config that cinfer does not implement (refused, naming
the flag, never ignored). Against the real binary."""
import json
import os
import subprocess
import urllib.request

import pytest

from cinfer_server import BIN, Server, copy_repo


def broken_repo():
    repo = copy_repo(["identity"])
    os.makedirs(os.path.join(repo, "broken", "1"))
    with open(os.path.join(repo, "broken", "config.pbtxt"), "w") as f:
        f.write('name: "broken"\nbackend: "onnx"\n')  # no model.onnx in 1/
    return repo


def run(args, timeout=60):
    return subprocess.run([BIN, "serve", "--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"] + args,
                          capture_output=True, text=True, timeout=timeout)


def test_exit_on_error_exits_naming_the_model_that_failed():
    p = run(["--model-repository", broken_repo(), "--exit-on-error", "true"])
    assert p.returncode == 1
    assert "--exit-on-error: 1 model(s) failed to load: 'broken'" in p.stdout + p.stderr
    assert "model.onnx" in p.stdout + p.stderr


def test_exit_on_error_names_an_unknown_load_model():
    p = run(["--model-repository", broken_repo(), "--model-control-mode", "explicit",
             "--load-model", "identity", "--load-model", "nope", "--exit-on-error=1"])
    assert p.returncode == 1
    out = p.stdout + p.stderr
    assert "--load-model 'nope': no such model in the repository" in out
    assert "'broken'" not in out  # not asked for in explicit mode: not a failure


def test_without_exit_on_error_the_server_serves_the_others():
    with Server(broken_repo(), args=["--strict-readiness", "false", "--http-thread-count", "2"]) as s:
        s.wait_ready()
        idx = json.load(urllib.request.urlopen(urllib.request.Request(
            s.url + "/v2/repository/index", data=b"{}", method="POST")))
        states = {m["name"]: m["state"] for m in idx}
        assert states == {"identity": "READY", "broken": "UNAVAILABLE"}


def test_allow_grpc_false_serves_no_grpc_port():
    with Server(copy_repo(["identity"]), args=["--grpc-port", "0", "--allow-grpc", "false"]) as s:
        s.wait_ready()
        assert s.grpc_port == 0


@pytest.mark.parametrize("flag,why", [
    ("--allow-http=false", "always serves its HTTP port"),
    ("--allow-metrics=false", "/metrics is always served"),
    ("--strict-model-config=true", "always auto-completed"),
    ("--exit-on-error=maybe", "'maybe' is not true or false"),
    ("--strict-readiness=yes", "'yes' is not true or false"),
])
def test_values_not_implemented_are_refused_naming_the_flag(flag, why):
    p = run(["--model-repository", copy_repo(["identity"]), flag])
    assert p.returncode == 2
    assert flag.split("=")[0] in p.stderr and why in p.stderr
