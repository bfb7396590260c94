"""Scheduling behaviour through the real server: hot reload under load, queue limits,
priorities, timeouts, warmup. Uses the sim backend (simulated accelerator; it sleeps)."""
import concurrent.futures as cf
import json
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

from cinfer_server import Server

SIM_CONFIG = """
name: "{name}"
backend: "sim"
max_batch_size: 8
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }} ]
{extra}
parameters {{ key: "base_us" value: {{ string_value: "{base_us}" }} }}
parameters {{ key: "per_item_us" value: {{ string_value: "{per_item_us}" }} }}
"""


def make_repo(name="sim", extra="dynamic_batching { }", base_us=20000, per_item_us=0, versions=(1,)):
    repo = tempfile.mkdtemp(prefix="cinfer-sched-")
    d = os.path.join(repo, name)
    for v in versions:
        os.makedirs(os.path.join(d, str(v)))
    with open(os.path.join(d, "config.pbtxt"), "w") as f:
        f.write(SIM_CONFIG.format(name=name, extra=extra, base_us=base_us, per_item_us=per_item_us))
    return repo


def infer(url, model="sim", params=None, version=None, timeout=30):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}
    if params:
        body["parameters"] = params
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_hot_reload_under_load_loses_nothing():
    repo = make_repo(base_us=15000)
    try:
        with Server(repo, ["--model-control-mode", "explicit", "--load-model", "sim"]) as s:
            s.wait_ready()
            stop = threading.Event()
            results = []

            def client():
                while not stop.is_set():
                    results.append(infer(s.url))

            threads = [threading.Thread(target=client) for _ in range(6)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 30
            while len(results) < 20 and time.monotonic() < deadline:
                time.sleep(0.01)
            os.makedirs(os.path.join(repo, "sim", "2"))
            req = urllib.request.Request(s.url + "/v2/repository/models/sim/load", data=b"", method="POST")
            assert urllib.request.urlopen(req, timeout=60).status == 200
            n_at_reload = len(results)
            deadline = time.monotonic() + 30
            while len(results) < n_at_reload + 30 and time.monotonic() < deadline:
                time.sleep(0.01)
            stop.set()
            for t in threads:
                t.join(30)
            codes = [c for c, _ in results]
            assert codes and all(c == 200 for c in codes), [r for r in results if r[0] != 200][:3]
            versions = [b["model_version"] for _, b in results]
            assert "1" in versions and "2" in versions
            assert versions[-1] == "2"
            # the old version drained and was unloaded
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                    "unloaded model 'sim' version 1" in l for l in s.log):
                time.sleep(0.05)
            assert any("unloaded model 'sim' version 1" in l for l in s.log), "".join(s.log)
            idx = json.load(urllib.request.urlopen(urllib.request.Request(
                s.url + "/v2/repository/index", data=b"", method="POST")))
            states = {(m["name"], m.get("version")): m["state"] for m in idx}
            assert states[("sim", "2")] == "READY"
            assert states[("sim", "1")] == "UNAVAILABLE"
    finally:
        shutil.rmtree(repo)


def test_queue_full_is_503_with_message():
    repo = make_repo(extra="dynamic_batching { default_queue_policy { max_queue_size: 2 } }",
                     base_us=200000)
    try:
        with Server(repo) as s:
            s.wait_ready()
            with cf.ThreadPoolExecutor(12) as ex:
                res = list(ex.map(lambda _: infer(s.url), range(12)))
            codes = sorted(c for c, _ in res)
            assert 200 in codes and 503 in codes, res
            msg = [b["error"] for c, b in res if c == 503][0]
            assert "queue is full" in msg and "max_queue_size 2" in msg and "'sim'" in msg, msg
            text = urllib.request.urlopen(s.url + "/metrics").read().decode()
            assert 'cinfer_rejected_total{model="sim",version="1",reason="queue_full"}' in text
    finally:
        shutil.rmtree(repo)


def test_request_timeout_reject():
    extra = ("dynamic_batching { default_queue_policy { timeout_action: REJECT "
             "default_timeout_microseconds: 30000 allow_timeout_override: true } }")
    repo = make_repo(extra=extra, base_us=150000)
    try:
        with Server(repo) as s:
            s.wait_ready()
            with cf.ThreadPoolExecutor(10) as ex:
                res = list(ex.map(lambda _: infer(s.url), range(10)))
            timed_out = [b["error"] for c, b in res if c == 503]
            assert timed_out and all("timed out" in m for m in timed_out), res
            assert any(c == 200 for c, _ in res)
    finally:
        shutil.rmtree(repo)


def wait_metric(url, line_prefix, want, timeout=20):
    """Waits until the metric line starting with line_prefix reads `want` (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = urllib.request.urlopen(url + "/metrics").read().decode()
        for l in text.splitlines():
            if l.startswith(line_prefix) and float(l.split()[-1]) == want:
                return
        time.sleep(0.005)
    raise AssertionError(f"{line_prefix} never reached {want}")


def test_priority_levels_serve_high_first():
    extra = "dynamic_batching { priority_levels: 2 default_priority_level: 2 }"
    repo = make_repo(extra=extra.replace("{ priority", "{ max_queue_delay_microseconds: 0 priority"),
                     base_us=40000)
    # max_batch_size 1 so each request is its own batch and order is observable
    with open(os.path.join(repo, "sim", "config.pbtxt")) as f:
        cfg = f.read().replace("max_batch_size: 8", "max_batch_size: 1")
    with open(os.path.join(repo, "sim", "config.pbtxt"), "w") as f:
        f.write(cfg)
    try:
        with Server(repo) as s:
            s.wait_ready()
            done = []
            lock = threading.Lock()

            def run(prio, tag):
                code, _ = infer(s.url, params={"priority": prio})
                with lock:
                    done.append((tag, code))

            pending = 'cinfer_pending_requests{model="sim",version="1"}'
            blocker = threading.Thread(target=run, args=(2, "blocker"))
            blocker.start()
            wait_metric(s.url, 'cinfer_execution_count_total{model="sim"', 0)  # loaded
            threads = [threading.Thread(target=run, args=(2, f"low{i}")) for i in range(3)]
            for t in threads:
                t.start()
            wait_metric(s.url, pending, 3)  # blocker executing, three low ones queued
            hi = threading.Thread(target=run, args=(1, "high"))
            hi.start()
            for t in threads + [hi, blocker]:
                t.join(30)
            order = [t for t, _ in done]
            assert all(c == 200 for _, c in done), done
            # the high-priority request overtakes the low ones that were queued before it
            assert order.index("high") < max(order.index(f"low{i}") for i in range(3)), order
    finally:
        shutil.rmtree(repo)


def test_warmup_runs_before_ready():
    extra = ("dynamic_batching { }\nmodel_warmup [ { name: \"w\" batch_size: 4 count: 3 "
             "inputs { key: \"x\" value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ]")
    repo = make_repo(extra=extra, base_us=1000)
    try:
        with Server(repo) as s:
            s.wait_ready()
            st = json.load(urllib.request.urlopen(s.url + "/v2/models/sim/stats"))["model_stats"][0]
            assert st["execution_count"] == 3 and st["inference_count"] == 12, st
    finally:
        shutil.rmtree(repo)


def test_bad_warmup_fails_the_load_with_reason():
    extra = ("model_warmup [ { name: \"w\" batch_size: 1 inputs { key: \"nope\" "
             "value: { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ]")
    repo = make_repo(extra=extra, base_us=1000)
    try:
        with Server(repo) as s:
            idx = json.load(urllib.request.urlopen(urllib.request.Request(
                s.url + "/v2/repository/index", data=b"", method="POST")))
            assert idx[0]["state"] == "UNAVAILABLE"
            assert "warmup 'w'" in idx[0]["reason"] and "nope" in idx[0]["reason"], idx
    finally:
        shutil.rmtree(repo)
