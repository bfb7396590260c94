"""ort_profile.py: ONNX Runtime's per-node kernel times for one model, to set beside
`cinfer run --profile` (docs/benchmarks-onnx.md).

    build/venv/bin/python bench/onnx/ort_profile.py MODEL_DIR [--threads T] [--runs N] [--daz]

MODEL_DIR holds model.onnx and test_data_set_0/input_0.pb (../shared/models/vision/*).
The session is the one bench_vs_ort.py times (ORT_ENABLE_ALL, intra_op_num_threads=T)
with ORT's profiler on; each node's time is the median of its "_kernel_time" events over
the runs after the first. Each conv of ORT's optimized graph is printed with its weight
shape and fused activation, so its nodes can be matched to cinfer's. The profiler adds its
own overhead: compare nodes with this, whole-model latency with bench_vs_ort.py.
--daz sets session.set_denormal_as_zero=1, as bench_vs_ort.py's --ort-daz: cinfer runs
with subnormals flushed, and on an Intel host ORT's convs over subnormal weights otherwise
take 10-100x longer (SSR-Net gender's first conv: 11.9 ms against ~0.1).
"""
import argparse, json, os, shutil, tempfile
import numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper

ap = argparse.ArgumentParser()
ap.add_argument("model_dir")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--runs", type=int, default=500)
ap.add_argument("--daz", action="store_true", help="session.set_denormal_as_zero=1")
a = ap.parse_args()

tmp = tempfile.mkdtemp(prefix="ort_profile.")
so = ort.SessionOptions()
so.intra_op_num_threads = a.threads
so.log_severity_level = 3  # not the warning that an NCHWc graph is host-specific
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.enable_profiling = True
if a.daz:
    so.add_session_config_entry("session.set_denormal_as_zero", "1")
so.profile_file_prefix = os.path.join(tmp, "ort")
so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
s = ort.InferenceSession(os.path.join(a.model_dir, "model.onnx"), so,
                         providers=["CPUExecutionProvider"])
t = onnx.TensorProto()
with open(os.path.join(a.model_dir, "test_data_set_0", "input_0.pb"), "rb") as f:
    t.ParseFromString(f.read())
feed = {s.get_inputs()[0].name: numpy_helper.to_array(t)}
for _ in range(a.runs):
    s.run(None, feed)
with open(s.end_profiling()) as f:
    events = json.load(f)

times = {}
for e in events:
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        times.setdefault((e["name"][:-len("_kernel_time")], e["args"].get("op_name")),
                         []).append(e["dur"])
g = onnx.load(so.optimized_model_filepath).graph
init = {i.name: list(i.dims) for i in g.initializer}
shutil.rmtree(tmp)
convs = {}
for n in g.node:
    if n.op_type == "Conv":
        act = next((onnx.helper.get_attribute_value(x).decode() for x in n.attribute
                    if x.name == "activation"), "")
        convs[n.name] = f"weight {init.get(n.input[1])} {act}".rstrip()
rows = sorted(((float(np.median(v[1:] or v)), k) for k, v in times.items()), reverse=True)
for us, (name, op) in rows:
    print(f"{us:8.1f} us  {op:20s} {name}  {convs.get(name, '')}")
print(f"sum of node medians: {sum(r[0] for r in rows):.1f} us over {len(rows)} nodes")
