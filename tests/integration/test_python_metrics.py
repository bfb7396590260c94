"""Custom metrics of Python models (pb_utils.MetricFamily / Metric, Triton's Custom Metrics
API) in the server's /metrics, with the real binary and tritonclient.http. The
custom_metrics model has the behaviour of Triton's examples/custom_metrics (add_sub that
adds its processing time to a COUNTER labelled model/version, three instances); the test
checks what that example's client.py checks (the sums, then the HELP, TYPE and series lines
at /metrics). The model files are written here from the documented API."""
import json
import os
import re
import shutil
import sys
import tempfile
import textwrap
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from cinfer_server import Server

os.environ["CINFER_PYTHON"] = sys.executable

CUSTOM_CONFIG = """
name: "custom_metrics"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
input [ { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 3 kind: KIND_CPU } ]
"""

CUSTOM_PY = """
import json
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.out0 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(cfg, "OUTPUT0")["data_type"])
        self.out1 = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(cfg, "OUTPUT1")["data_type"])
        self.metric_family = pb_utils.MetricFamily(
            name="requests_process_latency_ns",
            description="Cumulative time spent processing requests",
            kind=pb_utils.MetricFamily.COUNTER)
        self.metric = self.metric_family.Metric(labels={"model": "custom_metrics", "version": "1"})

    def execute(self, requests):
        responses = []
        start_ns = time.time_ns()
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0 = in_0.as_numpy() + in_1.as_numpy()
            out_1 = in_0.as_numpy() - in_1.as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", out_0.astype(self.out0)),
                pb_utils.Tensor("OUTPUT1", out_1.astype(self.out1))]))
        end_ns = time.time_ns()
        self.metric.increment(max(end_ns - start_ns, 1))
        pb_utils.Logger.log_info(
            "Cumulative requests processing latency: {}".format(self.metric.value()))
        return responses

    def finalize(self):
        print("Cleaning up...")
"""

KINDS_CONFIG = """
name: "metric_kinds"
backend: "python"
input [ { name: "X" data_type: TYPE_FP64 dims: [ 1 ] } ]
output [ { name: "REPORT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# Every execute: the counter += X, the gauge = X, the histogram observes X; the report is
# what value() says and what each misuse raised.
KINDS_PY = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

def err(fn):
    try:
        fn()
    except pb_utils.TritonModelException as e:
        return str(e)
    return None

class TritonPythonModel:
    def initialize(self, args):
        self.c = pb_utils.MetricFamily("py_test_things_total", "Things counted", pb_utils.MetricFamily.COUNTER)
        self.g = pb_utils.MetricFamily("py_test_level", "A level", pb_utils.MetricFamily.GAUGE)
        self.h = pb_utils.MetricFamily("py_test_size", "Sizes seen", pb_utils.MetricFamily.HISTOGRAM)
        self.cm = self.c.Metric(labels={"kind": "a", "quote": 'say "hi"'})
        self.cm2 = self.c.Metric(labels={"kind": "b"})
        self.gm = self.g.Metric()
        self.hm = self.h.Metric(labels={"kind": "a"}, buckets=[1.0, 10.0, 100.0])
        self.temp = None

    def execute(self, requests):
        out = []
        for r in requests:
            x = float(pb_utils.get_input_tensor_by_name(r, "X").as_numpy()[0])
            if x < 0:  # create then delete a series
                if self.temp is None:
                    self.temp = self.c.Metric(labels={"kind": "temp"})
                    self.temp.increment(1)
                else:
                    self.temp = None
            self.cm.increment(abs(x))
            self.cm2.increment(1)
            self.gm.set(x)
            self.hm.observe(abs(x))
            rep = {
                "counter": self.cm.value(), "counter_b": self.cm2.value(), "gauge": self.gm.value(),
                "neg_counter": err(lambda: self.cm.increment(-1)),
                "set_counter": err(lambda: self.cm.set(1)),
                "observe_gauge": err(lambda: self.gm.observe(1)),
                "hist_value": err(lambda: self.hm.value()),
                "hist_no_buckets": err(lambda: self.h.Metric(labels={"kind": "z"})),
                "hist_other_buckets": err(lambda: self.h.Metric(labels={"kind": "y"}, buckets=[2.0])),
                "counter_buckets": err(lambda: self.c.Metric(labels={"kind": "x"}, buckets=[1.0])),
                "other_kind": err(lambda: pb_utils.MetricFamily("py_test_level", "x", pb_utils.MetricFamily.COUNTER)),
                "bad_name": err(lambda: pb_utils.MetricFamily("bad name", "x", pb_utils.MetricFamily.GAUGE)),
                "reserved": err(lambda: pb_utils.MetricFamily("nv_inference_count", "x", pb_utils.MetricFamily.GAUGE)),
                "bad_label": err(lambda: self.g.Metric(labels={"bad-label": "v"})),
                "bad_kind": err(lambda: pb_utils.MetricFamily("py_test_x", "x", "SUMMARY")),
                "same_family": err(lambda: pb_utils.MetricFamily("py_test_level", "other text", pb_utils.MetricFamily.GAUGE)),
            }
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "REPORT", np.array([json.dumps(rep).encode()], dtype=np.object_))]))
        return out
"""


def write_model(repo, name, config, py):
    os.makedirs(os.path.join(repo, name, "1"))
    with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
        f.write(textwrap.dedent(config))
    with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
        f.write(textwrap.dedent(py))


@pytest.fixture(scope="module")
def server():
    repo = tempfile.mkdtemp(prefix="cinfer-pymetrics-")
    write_model(repo, "custom_metrics", CUSTOM_CONFIG, CUSTOM_PY)
    write_model(repo, "metric_kinds", KINDS_CONFIG, KINDS_PY)
    try:
        with Server(repo, ["--model-control-mode", "explicit", "--load-model", "custom_metrics",
                           "--load-model", "metric_kinds"]) as s:
            s.wait_ready()
            yield s
    finally:
        shutil.rmtree(repo)


def metrics(server):
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        return r.read().decode()


def series(text, name):
    """{labels string: value} of the family's series lines."""
    out = {}
    for line in text.splitlines():
        m = re.match(re.escape(name) + r"(\{.*\})? (\S+)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def test_custom_metrics_example_client_checks(server):
    """What examples/custom_metrics/client.py does: one request, the sums, then the three
    patterns at /metrics; plus: the counter grew, and all three instances share it."""
    with httpclient.InferenceServerClient(server.hostport) as client:
        a = np.random.rand(4).astype(np.float32)
        b = np.random.rand(4).astype(np.float32)
        inputs = [httpclient.InferInput("INPUT0", a.shape, "FP32"),
                  httpclient.InferInput("INPUT1", b.shape, "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1")]
        r = client.infer("custom_metrics", inputs, request_id="1", outputs=outputs)
        assert np.allclose(a + b, r.as_numpy("OUTPUT0")) and np.allclose(a - b, r.as_numpy("OUTPUT1"))
        text = metrics(server)
        for pattern in ["# HELP requests_process_latency_ns Cumulative time spent processing requests",
                        "# TYPE requests_process_latency_ns counter",
                        'requests_process_latency_ns{model="custom_metrics",version="1"}']:
            assert pattern in text
        first = series(text, "requests_process_latency_ns")
        assert list(first) == ['{model="custom_metrics",version="1"}'] and first[list(first)[0]] > 0
        for _ in range(6):
            client.infer("custom_metrics", inputs, outputs=outputs)
        after = series(metrics(server), "requests_process_latency_ns")
        assert list(after) == list(first)  # one series for the three instances
        assert after[list(after)[0]] > first[list(first)[0]]


def kinds(client, x):
    i = httpclient.InferInput("X", [1], "FP64")
    i.set_data_from_numpy(np.array([x], dtype=np.float64))
    r = client.infer("metric_kinds", [i])
    return json.loads(r.as_numpy("REPORT")[0])


def test_counter_gauge_histogram_and_misuse(server):
    with httpclient.InferenceServerClient(server.hostport) as client:
        r1 = kinds(client, 5.0)
        r2 = kinds(client, 50.0)
    assert (r1["counter"], r1["counter_b"], r1["gauge"]) == (5.0, 1.0, 5.0)
    assert (r2["counter"], r2["counter_b"], r2["gauge"]) == (55.0, 2.0, 50.0)
    assert "COUNTER must not be negative" in r2["neg_counter"]
    assert "only supported for GAUGE" in r2["set_counter"]
    assert "only supported for HISTOGRAM" in r2["observe_gauge"]
    assert "not supported for HISTOGRAM" in r2["hist_value"]
    assert "needs buckets" in r2["hist_no_buckets"]
    assert "buckets differ" in r2["hist_other_buckets"]
    assert "only for HISTOGRAM" in r2["counter_buckets"]
    assert "exists with kind GAUGE" in r2["other_kind"]
    assert "not a Prometheus metric name" in r2["bad_name"]
    assert "server's own" in r2["reserved"]
    assert "bad-label" in r2["bad_label"]
    assert "COUNTER, GAUGE or HISTOGRAM" in r2["bad_kind"]
    assert r2["same_family"] is None  # same name and kind: the same family
    text = metrics(server)
    assert "# HELP py_test_things_total Things counted\n# TYPE py_test_things_total counter" in text
    assert series(text, "py_test_things_total") == {'{kind="a",quote="say \\"hi\\""}': 55.0,
                                                    '{kind="b"}': 2.0}
    assert "# TYPE py_test_level gauge" in text and series(text, "py_test_level") == {"": 50.0}
    assert "# TYPE py_test_size histogram" in text
    assert series(text, "py_test_size_bucket") == {'{kind="a",le="1"}': 0.0, '{kind="a",le="10"}': 1.0,
                                                   '{kind="a",le="100"}': 2.0, '{kind="a",le="+Inf"}': 2.0}
    assert series(text, "py_test_size_sum") == {'{kind="a"}': 55.0}
    assert series(text, "py_test_size_count") == {'{kind="a"}': 2.0}


def test_deleted_metric_and_unloaded_model_leave_metrics(server):
    with httpclient.InferenceServerClient(server.hostport) as client:
        kinds(client, -1.0)  # creates the series kind="temp"
        assert '{kind="temp"}' in series(metrics(server), "py_test_things_total")
        kinds(client, -1.0)  # drops the Metric object: the series goes
        assert '{kind="temp"}' not in series(metrics(server), "py_test_things_total")
        client.unload_model("metric_kinds")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and series(metrics(server), "py_test_level"):
            time.sleep(0.05)
        text = metrics(server)
        assert series(text, "py_test_level") == {} and series(text, "py_test_things_total") == {}
        assert series(text, "requests_process_latency_ns")  # the other model's stays
        client.load_model("metric_kinds")
        r = kinds(client, 2.0)  # a new process: its metrics start again
        assert (r["counter"], r["gauge"]) == (2.0, 2.0)
