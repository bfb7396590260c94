"""Process lifecycle: SIGTERM/SIGINT drain and exit 0; readiness; poll mode."""
import os
import shutil
import signal
import time
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from cinfer_server import Server, copy_repo


def test_sigterm_exits_zero():
    s = Server().start()
    s.wait_ready()
    assert s.stop(signal.SIGTERM) == 0
    assert any("draining" in l for l in s.log)


def test_sigint_exits_zero():
    s = Server().start()
    s.wait_ready()
    assert s.stop(signal.SIGINT) == 0


def test_poll_mode_picks_up_new_version_and_new_model():
    repo = copy_repo(["identity_fp32"])
    try:
        with Server(repo, ["--model-control-mode", "poll", "--repository-poll-secs", "1"]) as s:
            s.wait_ready()
            c = httpclient.InferenceServerClient(s.hostport)
            assert c.get_model_metadata("identity_fp32")["versions"] == ["1"]
            os.makedirs(os.path.join(repo, "identity_fp32", "2"))
            shutil.copytree(os.path.join(repo, "identity_fp32"), os.path.join(repo, "identity_fp32b"))
            cfg = os.path.join(repo, "identity_fp32b", "config.pbtxt")
            with open(cfg) as f:
                text = f.read().replace('"identity_fp32"', '"identity_fp32b"')
            with open(cfg, "w") as f:
                f.write(text)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if (c.get_model_metadata("identity_fp32")["versions"] == ["2"]
                            and c.is_model_ready("identity_fp32b")):
                        break
                except Exception:
                    pass
                time.sleep(0.1)
            assert c.get_model_metadata("identity_fp32")["versions"] == ["2"]
            assert c.is_model_ready("identity_fp32b")
            x = np.ones((1, 2), dtype=np.float32)
            inp = httpclient.InferInput("INPUT0", [1, 2], "FP32")
            inp.set_data_from_numpy(x)
            assert c.infer("identity_fp32", [inp]).get_response()["model_version"] == "2"
            shutil.rmtree(os.path.join(repo, "identity_fp32b"))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and c.is_model_ready("identity_fp32b"):
                time.sleep(0.1)
            assert not c.is_model_ready("identity_fp32b")
            c.close()
    finally:
        shutil.rmtree(repo)


def test_bad_config_is_reported_and_server_not_ready():
    repo = copy_repo(["identity_fp32"])
    try:
        os.makedirs(os.path.join(repo, "broken", "1"))
        with open(os.path.join(repo, "broken", "config.pbtxt"), "w") as f:
            f.write('name: "broken"\nbackend: "identity"\nmax_batch_size: -3\n')
        with Server(repo) as s:
            c = httpclient.InferenceServerClient(s.hostport)
            assert c.is_server_live()
            assert not c.is_server_ready()  # strict readiness: a model failed
            assert c.is_model_ready("identity_fp32")
            idx = {m["name"]: m for m in c.get_model_repository_index()}
            assert idx["broken"]["state"] == "UNAVAILABLE"
            assert "config.pbtxt:3:" in idx["broken"]["reason"], idx["broken"]
            c.close()
    finally:
        shutil.rmtree(repo)
