"""The sequence batcher (Triton's sequence_batching) through the real binary with tritonclient
over HTTP: control inputs (START/END/READY/CORRID, int32/fp32/bool forms), the direct and
oldest strategies, implicit state carried between requests of a sequence, integer and string
sequence ids, interleaved and concurrent sequences, idle release, and Triton's error texts.
The ONNX models are built at test time (seq_models.py)."""
import concurrent.futures as cf
import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import seq_models as sm
from cinfer_server import Server

VALUES = [11, 7, 5, 3, 2, 0, 1]
BUILD = os.environ.get("CINFER_BUILD_DIR", "build")
PROBE_DIR = os.path.join(BUILD, "tests", "backends")  # seq_probe/libcinfer_seq_probe.so


@pytest.fixture(scope="module")
def server():
    repo = sm.write_repo({
        "simple_sequence": sm.simple_sequence(),
        "simple_dyna_sequence": sm.simple_dyna_sequence(),
        "accumulator": sm.accumulator(),
        "acc_oldest": sm.accumulator("acc_oldest", strategy="oldest { max_candidate_sequences: 6 "
                                     "preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 2000 }",
                                     initial=1000, instances=2),
        "acc_nobatch": sm.accumulator("acc_nobatch", max_batch=0, instances=4),  # 4 slots
        "acc_idle": sm.accumulator("acc_idle", idle_us=1500000),
        "acc_direct_delay": sm.accumulator("acc_direct_delay", strategy="direct { max_queue_delay_microseconds: "
                                           "3000 minimum_slot_utilization: 0.5 }", instances=2),
        "controls": sm.controls(),
        "simple_string_dyna_sequence": sm.probe_sequence(),
        "probe_u64_direct": sm.probe_sequence("probe_u64_direct", "TYPE_UINT64", "direct { }"),
    })
    assert os.path.exists(os.path.join(PROBE_DIR, "seq_probe", "libcinfer_seq_probe.so")), PROBE_DIR
    with Server(repo, ["--backend-directory", PROBE_DIR]) as s:
        s.wait_ready()
        yield s


@pytest.fixture
def client(server):
    return httpclient.InferenceServerClient(server.hostport)


def infer(client, model, value, seq_id, start=False, end=False, dtype="INT32", outputs=None):
    x = np.full((1, 1), value, dtype=np.int32 if dtype == "INT32" else np.float32)
    if model == "acc_nobatch":
        x = x.reshape(1)
    inp = httpclient.InferInput("INPUT", list(x.shape), dtype)
    inp.set_data_from_numpy(x)
    outs = [httpclient.InferRequestedOutput(o) for o in outputs] if outputs else None
    return client.infer(model, [inp], outputs=outs, sequence_id=seq_id, sequence_start=start,
                        sequence_end=end)


def out(res, name="OUTPUT"):
    return res.as_numpy(name).reshape(-1)[0].item()


def test_simple_sequence_interleaved_int_and_string_ids(client):
    """Triton's simple_http_sequence_sync_infer_client.py, with its three sequences interleaved
    step by step instead of one after another: OUTPUT = INPUT + START."""
    sid = str(uuid.uuid4())
    seqs = [(1000, [0] + VALUES), (1001, [100] + [-v for v in VALUES]), (sid, [20] + [-v for v in VALUES])]
    got = {k: [] for k, _ in seqs}
    n = len(seqs[0][1])
    for i in range(n):
        for k, vals in seqs:
            got[k].append(out(infer(client, "simple_sequence", vals[i], k, start=i == 0, end=i == n - 1)))
    for k, vals in seqs:
        assert got[k] == [vals[0] + 1] + vals[1:], k


def test_dyna_sequence_oldest_corrid(client):
    """simple_dyna_sequence (oldest, CORRID UINT64): OUTPUT = INPUT + START + END * CORRID, the
    expectations of the example's -d run for its integer sequences."""
    a, b = 1000, 1001
    n = len(VALUES) + 1
    ra, rb = [], []
    for i in range(n):
        va = ([0] + VALUES)[i]
        vb = ([100] + [-v for v in VALUES])[i]
        ra.append(out(infer(client, "simple_dyna_sequence", va, a, start=i == 0, end=i == n - 1)))
        rb.append(out(infer(client, "simple_dyna_sequence", vb, b, start=i == 0, end=i == n - 1)))
    assert ra == [1] + VALUES[:-1] + [1 + a]
    assert rb == [101] + [-v for v in VALUES[:-1]] + [-1 + b]


def test_string_dyna_sequence_with_a_custom_backend(client):
    """The example's -d string sequence: CORRID as TYPE_STRING reaches a (shared-object)
    backend as a BYTES tensor; the implicit state works for any backend. Expected values are
    the example's: 20, then the running sum, plus int(id) at END."""
    sid = "1002"
    vals = [20] + [-v for v in VALUES]
    got = [out(infer(client, "simple_string_dyna_sequence", v, sid, start=i == 0, end=i == len(vals) - 1))
           for i, v in enumerate(vals)]
    exp = list(np.cumsum(vals))
    exp[-1] += 1002
    assert got == exp


@pytest.mark.parametrize("model,ids", [("simple_string_dyna_sequence", [str(3000 + i) for i in range(10)]),
                                       ("probe_u64_direct", [4000 + i for i in range(10)])])
def test_probe_concurrent(server, model, ids):
    rng = np.random.default_rng(3)
    work = {k: rng.integers(-9, 9, 12).tolist() for k in ids}
    with cf.ThreadPoolExecutor(len(ids)) as ex:
        futs = {k: ex.submit(run_sequence, server.hostport, model, k, v) for k, v in work.items()}
        for k, f in futs.items():
            exp = np.cumsum(work[k]).tolist()
            exp[-1] += int(k)
            assert f.result(timeout=120) == exp, k


def test_server_metadata_lists_sequence_extension(client):
    ext = client.get_server_metadata()["extensions"]
    assert "sequence" in ext and "sequence(string_id)" in ext


def test_control_values_and_corrid(client):
    """START int32_false_true [0, 7], END fp32_false_true [0, 2], READY bool: the model sees
    the configured values (OUTPUT = 100 START + 10 END + READY) and CORRID as INT64."""
    r = [infer(client, "controls", 0, 77, start=True, dtype="FP32"),
         infer(client, "controls", 0, 77, dtype="FP32"),
         infer(client, "controls", 0, 77, end=True, dtype="FP32"),
         infer(client, "controls", 0, 78, start=True, end=True, dtype="FP32")]
    assert [out(x) for x in r] == [701.0, 1.0, 21.0, 721.0]
    assert [out(x, "CORRID_OUT") for x in r] == [77, 77, 77, 78]
    assert r[0].as_numpy("CORRID_OUT").dtype == np.int64


@pytest.mark.parametrize("model", ["accumulator", "acc_nobatch", "acc_direct_delay"])
def test_implicit_state_interleaved(client, model):
    """The state (STATE_IN <- STATE_OUT) is carried per sequence, zeroed at START, and never
    shown to the client; integer and string ids interleave."""
    rng = np.random.default_rng(7)
    ids = [5, 6, "alpha", "beta-" + str(uuid.uuid4())]
    vals = {k: rng.integers(-50, 50, 9).tolist() for k in ids}
    got = {k: [] for k in ids}
    for i in range(9):
        for k in ids:
            res = infer(client, model, vals[k][i], k, start=i == 0, end=i == 8)
            got[k].append(out(res))
            names = {o["name"] for o in res.get_response()["outputs"]}
            assert names == {"OUTPUT", "OUTPUT_START"}  # STATE_OUT stays inside
            assert out(res, "OUTPUT_START") == (1 if i == 0 else 0)
    for k in ids:
        assert got[k] == np.cumsum(vals[k]).tolist(), k


def test_restart_resets_state(client):
    infer(client, "accumulator", 5, 900, start=True)
    assert out(infer(client, "accumulator", 5, 900)) == 10
    # a new START on an open sequence starts over (Triton: the old one ends early)
    assert out(infer(client, "accumulator", 3, 900, start=True)) == 3
    assert out(infer(client, "accumulator", 4, 900, end=True)) == 7


def run_sequence(hostport, model, seq_id, values, start_value=0):
    c = httpclient.InferenceServerClient(hostport)
    res = []
    for i, v in enumerate(values):
        res.append(out(infer(c, model, v, seq_id, start=i == 0, end=i == len(values) - 1)))
    return res


@pytest.mark.parametrize("model,n_seq,initial", [("accumulator", 12, 0), ("acc_oldest", 10, 1000),
                                                  ("acc_direct_delay", 6, 0)])
def test_concurrent_sequences(server, model, n_seq, initial):
    """Sequences from threads at once: with 12 sequences on 8 direct slots, four wait in the
    backlog until a slot frees; oldest batches several sequences per execution. Each sequence
    sees exactly its own running sum."""
    rng = np.random.default_rng(11)
    work = {i + 1: rng.integers(-100, 100, 15).tolist() for i in range(n_seq)}
    with cf.ThreadPoolExecutor(n_seq) as ex:
        futs = {k: ex.submit(run_sequence, server.hostport, model, 7000 + k, v) for k, v in work.items()}
        for k, f in futs.items():
            assert f.result(timeout=120) == (initial + np.cumsum(work[k])).tolist(), k
    stats = httpclient.InferenceServerClient(server.hostport).get_inference_statistics(model)
    st = stats["model_stats"][0]
    assert st["inference_count"] >= n_seq * 15
    if model == "acc_oldest":  # several sequences shared executions
        assert st["execution_count"] < st["inference_count"]


def metric_value(server, name, model):
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(r'^%s\{[^}]*model="%s"[^}]*\} (\S+)$' % (name, model), text, re.M)
    assert m, f"{name} for {model} not in /metrics"
    return float(m.group(1))


def test_idle_sequence_is_released(server, client):
    """max_sequence_idle_microseconds 1500000: an idle sequence loses its slot; a later request
    of it gets Triton's START error. Waits on the sequence gauge, bounded."""
    assert out(infer(client, "acc_idle", 4, 31, start=True)) == 4
    assert metric_value(server, "cinfer_sequence_active", "acc_idle") == 1
    deadline = time.monotonic() + 30
    while metric_value(server, "cinfer_sequence_active", "acc_idle") != 0:
        assert time.monotonic() < deadline, "idle sequence never released"
        time.sleep(0.05)
    with pytest.raises(InferenceServerException) as e:
        infer(client, "acc_idle", 1, 31)
    assert "inference request for sequence 31 to model 'acc_idle' must specify the START flag on " \
           "the first request of the sequence" in str(e.value)
    # a sequence that keeps talking is not released: END after it works
    assert out(infer(client, "acc_idle", 2, 32, start=True)) == 2
    assert out(infer(client, "acc_idle", 3, 32, end=True)) == 5


def post(server, model, body):
    req = urllib.request.Request(f"{server.url}/v2/models/{model}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def body(params, value=1, shape=(1, 1), extra_inputs=()):
    ins = [{"name": "INPUT", "shape": list(shape), "datatype": "INT32",
            "data": [value] * int(np.prod(shape))}] + list(extra_inputs)
    return {"inputs": ins, "parameters": params}


@pytest.mark.parametrize("params,msg", [
    ({}, "inference request to model 'accumulator' must specify a non-zero or non-empty correlation ID"),
    ({"sequence_id": 0, "sequence_start": True},
     "inference request to model 'accumulator' must specify a non-zero or non-empty correlation ID"),
    ({"sequence_id": "", "sequence_start": True},
     "inference request to model 'accumulator' must specify a non-zero or non-empty correlation ID"),
    ({"sequence_id": 424242},
     "inference request for sequence 424242 to model 'accumulator' must specify the START flag on the "
     "first request of the sequence"),
    ({"sequence_id": "never-started"},
     "inference request for sequence never-started to model 'accumulator' must specify the START flag"),
    ({"sequence_id": 1.5, "sequence_start": True}, "parameter 'sequence_id' must be an unsigned integer"),
    ({"sequence_id": -3, "sequence_start": True}, "parameter 'sequence_id' must be an unsigned integer"),
    ({"sequence_id": 3, "sequence_start": "yes"}, "parameter 'sequence_start' must be a boolean"),
    ({"sequence_id": "x" * 1025, "sequence_start": True}, "longer than 1024 bytes"),
])
def test_request_errors(server, params, msg):
    code, js = post(server, "accumulator", body(params))
    assert code == 400, js
    assert msg in js["error"], js


def test_more_errors(server, client):
    code, js = post(server, "accumulator", body({"sequence_id": 9, "sequence_start": True}, shape=(2, 1)))
    assert code == 400 and "inference request to model 'accumulator' must specify batch-size 1 due to " \
        "requirements of sequence batcher" in js["error"], js
    code, js = post(server, "controls", {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "FP32",
                                                     "data": [1]}],
                                         "parameters": {"sequence_id": "abc", "sequence_start": True}})
    assert code == 400 and "sequence batching control 'CORRID' data-type is 'BYTES', but model 'controls' " \
        "expects 'INT64'" in js["error"], js
    # the batcher's own inputs cannot come from a client
    for name in ("START", "STATE_IN"):
        extra = [{"name": name, "shape": [1, 1], "datatype": "INT32", "data": [1]}]
        code, js = post(server, "accumulator", body({"sequence_id": 9, "sequence_start": True},
                                                    extra_inputs=extra))
        assert code == 400 and f"unexpected inference input '{name}'" in js["error"], js
    # after END the id is free: without START it is unknown, with START it is a new sequence
    infer(client, "accumulator", 1, 55, start=True, end=True)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        infer(client, "accumulator", 1, 55)
    assert out(infer(client, "accumulator", 8, 55, start=True, end=True)) == 8
    # errors changed nothing for a sequence in flight
    infer(client, "accumulator", 2, 56, start=True)
    post(server, "accumulator", body({"sequence_id": 56}, shape=(2, 1)))
    assert out(infer(client, "accumulator", 3, 56, end=True)) == 5


BAD_CONFIGS = [
    ("generative_sequence: true", "sequence_batching.generative_sequence is not implemented"),
    ("iterative_sequence: true", "sequence_batching.iterative_sequence is not implemented"),
    ('oldest { preserve_ordering: true }', "sequence_batching.oldest.preserve_ordering is not implemented"),
    ('direct { minimum_slot_utilization: 1.5 }', "minimum slot utilization must be in range (0.0, 1.0]"),
    ('oldest { preferred_batch_size: 9 }', "preferred batch size must be <= max batch size"),
    ('control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } ] } ]',
     "unexpected data type for control CONTROL_SEQUENCE_CORRID"),
    ('control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_BOGUS int32_false_true: [0, 1] } ] } ]',
     "unknown control kind"),
    ('control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_START } ] } ]',
     "must specify exactly one of int32_false_true, fp32_false_true and bool_false_true"),
    ('control_input [ { name: "INPUT" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] } ] } ]',
     "control input 'INPUT' is also listed in 'input'"),
    ('state [ { input_name: "S" output_name: "T" data_type: TYPE_INT32 dims: [ 1 ] use_growable_memory: true } ]',
     "sequence_batching.state.use_growable_memory is not implemented"),
    ('state [ { input_name: "S" output_name: "T" data_type: TYPE_INT32 dims: [ -1 ] } ]',
     "needs an initial_state"),
    ('state [ { input_name: "S" output_name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]',
     "state output_name 'OUTPUT' is also listed in 'output'"),
    ('state [ { input_name: "S" output_name: "T" data_type: TYPE_INT32 dims: [ 1 ] initial_state { '
     'data_type: TYPE_INT32 dims: [ 1 ] data_file: "missing.bin" } } ]', "cannot open initial_state data_file"),
]


def test_unsupported_and_bad_config_fails_load():
    """Every field not implemented, and every bad value, fails the load with a reason naming it;
    the other models load."""
    models = {}
    for i, (extra, _) in enumerate(BAD_CONFIGS):
        onnx_b, cfg = sm.simple_sequence(f"bad{i}", extra=extra)
        models[f"bad{i}"] = (onnx_b, cfg)
    models["good"] = sm.simple_sequence("good")
    with Server(sm.write_repo(models)) as s:
        req = urllib.request.Request(s.url + "/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            index = {e["name"]: e for e in json.loads(r.read())}
        assert index["good"]["state"] == "READY"
        for i, (_, msg) in enumerate(BAD_CONFIGS):
            e = index[f"bad{i}"]
            assert e["state"] != "READY" and msg in e["reason"], (i, e)
