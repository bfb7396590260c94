"""Sequence-batching test models, written at test time with the onnx package (no model file is
committed). Each maker returns (model.onnx bytes, config.pbtxt text) and `write_repo` lays them
out as a model repository."""
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as TP, helper

INT32_CTL = "int32_false_true: [ 0, 1 ]"


# Test models keep an idle sequence for 60 s (Triton's default is 1 s): on a loaded machine a
# gap of over a second between two requests of a sequence must not release it. The idle
# release test sets its own short value.
LONG_IDLE = "max_sequence_idle_microseconds: 60000000"


def _model(name, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m.SerializeToString()


def _vi(name, t, dims=("batch", 1)):
    return helper.make_tensor_value_info(name, t, list(dims))


def _control(name, kind, values=INT32_CTL, data_type=None):
    body = f"kind: {kind}\n" + (values if data_type is None else f"data_type: {data_type}")
    return f'{{ name: "{name}" control [ {{ {body} }} ] }}'


def _io(kind, name, dt, dims="[ 1 ]"):
    return f'{kind} [ {{ name: "{name}" data_type: {dt} dims: {dims} }} ]'


def simple_sequence(name="simple_sequence", strategy="", extra=""):
    """Triton's docs/examples simple_sequence, rebuilt: OUTPUT = READY * (INPUT + START)."""
    nodes = [helper.make_node("Add", ["INPUT", "START"], ["sum"]),
             helper.make_node("Mul", ["READY", "sum"], ["OUTPUT"])]
    onnx_b = _model(name, nodes, [_vi("INPUT", TP.INT32), _vi("START", TP.INT32),
                                  _vi("READY", TP.INT32)], [_vi("OUTPUT", TP.INT32)])
    cfg = f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  {strategy}
  {extra if "idle" in extra else extra + " " + LONG_IDLE}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START")},
    {_control("READY", "CONTROL_SEQUENCE_READY")}
  ]
}}
{_io("input", "INPUT", "TYPE_INT32")}
{_io("output", "OUTPUT", "TYPE_INT32")}
instance_group [ {{ kind: KIND_CPU }} ]
"""
    return onnx_b, cfg


def simple_dyna_sequence(name="simple_dyna_sequence", corrid_type="TYPE_UINT64", instances=2):
    """Triton's simple_dyna_sequence, rebuilt:
    OUTPUT = READY * (INPUT + START + END * int32(CORRID))."""
    onnx_t = {"TYPE_UINT64": TP.UINT64, "TYPE_INT64": TP.INT64, "TYPE_UINT32": TP.UINT32,
              "TYPE_INT32": TP.INT32}[corrid_type]
    nodes = [helper.make_node("Cast", ["CORRID"], ["cid"], to=TP.INT32),
             helper.make_node("Add", ["INPUT", "START"], ["a0"]),
             helper.make_node("Mul", ["END", "cid"], ["m0"]),
             helper.make_node("Add", ["a0", "m0"], ["s0"]),
             helper.make_node("Mul", ["READY", "s0"], ["OUTPUT"])]
    onnx_b = _model(name, nodes, [_vi("INPUT", TP.INT32), _vi("START", TP.INT32),
                                  _vi("END", TP.INT32), _vi("READY", TP.INT32),
                                  _vi("CORRID", onnx_t)], [_vi("OUTPUT", TP.INT32)])
    cfg = f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
sequence_batching {{
  max_sequence_idle_microseconds: 10000000
  oldest {{ max_candidate_sequences: 1024 max_queue_delay_microseconds: 10000 }}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START")},
    {_control("END", "CONTROL_SEQUENCE_END")},
    {_control("READY", "CONTROL_SEQUENCE_READY")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", data_type=corrid_type)}
  ]
}}
{_io("input", "INPUT", "TYPE_INT32")}
{_io("output", "OUTPUT", "TYPE_INT32")}
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""
    return onnx_b, cfg


def accumulator(name="accumulator", strategy="", idle_us=None, initial=None, instances=1,
                max_batch=8):
    """Implicit state: OUTPUT = STATE_IN + INPUT, STATE_OUT = OUTPUT. `initial`: an int32 the
    state starts from (written to initial_state/init.bin), else zeros."""
    nodes = [helper.make_node("Add", ["STATE_IN", "INPUT"], ["OUTPUT"]),
             helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
             # START reaches the graph as an ordinary input: OUTPUT_START echoes it
             helper.make_node("Identity", ["START"], ["OUTPUT_START"])]
    dims = ("batch", 1) if max_batch else (1,)
    onnx_b = _model(name, nodes, [_vi("INPUT", TP.INT32, dims), _vi("START", TP.INT32, dims),
                                  _vi("STATE_IN", TP.INT32, dims)],
                    [_vi("OUTPUT", TP.INT32, dims), _vi("STATE_OUT", TP.INT32, dims),
                     _vi("OUTPUT_START", TP.INT32, dims)])
    init = ""
    if initial is not None:
        init = 'initial_state { name: "init" data_type: TYPE_INT32 dims: [ 1 ] data_file: "init.bin" }'
    idle = f"max_sequence_idle_microseconds: {idle_us}" if idle_us else LONG_IDLE
    cfg = f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
sequence_batching {{
  {strategy}
  {idle}
  control_input [ {_control("START", "CONTROL_SEQUENCE_START")} ]
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            {init} }} ]
}}
{_io("input", "INPUT", "TYPE_INT32")}
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
         {{ name: "OUTPUT_START" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""
    files = {}
    if initial is not None:
        files["initial_state/init.bin"] = np.array([initial], dtype=np.int32).tobytes()
    return onnx_b, cfg, files


def controls(name="controls", strategy=""):
    """Stateless: OUTPUT = 100*START + 10*END + READY (FP32) with START int32 [0, 7], END fp32
    [0, 2], READY bool; CORRID_OUT = CORRID (INT64)."""
    nodes = [helper.make_node("Cast", ["START"], ["sf"], to=TP.FLOAT),
             helper.make_node("Cast", ["READY"], ["rf"], to=TP.FLOAT),
             helper.make_node("Mul", ["sf", "c100"], ["s100"]),
             helper.make_node("Mul", ["END", "c10"], ["e10"]),
             helper.make_node("Add", ["s100", "e10"], ["se"]),
             helper.make_node("Add", ["se", "rf"], ["OUTPUT"]),
             helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"])]
    inits = [helper.make_tensor("c100", TP.FLOAT, [], [100.0]),
             helper.make_tensor("c10", TP.FLOAT, [], [10.0])]
    onnx_b = _model(name, nodes, [_vi("INPUT", TP.FLOAT), _vi("START", TP.INT32),
                                  _vi("END", TP.FLOAT), _vi("READY", TP.BOOL),
                                  _vi("CORRID", TP.INT64)],
                    [_vi("OUTPUT", TP.FLOAT), _vi("CORRID_OUT", TP.INT64)], inits)
    cfg = f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 4
sequence_batching {{
  {strategy}
  {LONG_IDLE}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START", "int32_false_true: [ 0, 7 ]")},
    {_control("END", "CONTROL_SEQUENCE_END", "fp32_false_true: [ 0, 2 ]")},
    {_control("READY", "CONTROL_SEQUENCE_READY", "bool_false_true: [ false, true ]")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", data_type="TYPE_INT64")}
  ]
}}
{_io("input", "INPUT", "TYPE_FP32")}
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }},
         {{ name: "CORRID_OUT" data_type: TYPE_INT64 dims: [ 1 ] }} ]
"""
    return onnx_b, cfg


def probe_sequence(name="simple_string_dyna_sequence", corrid_type="TYPE_STRING", strategy=None):
    """A model of the seq_probe test backend (tests/backends/seq_probe.c): accumulates INPUT in
    the implicit state and adds CORRID at END (Triton's simple_string_dyna_sequence)."""
    strategy = strategy or "oldest { max_candidate_sequences: 64 max_queue_delay_microseconds: 1000 }"
    cfg = f"""name: "{name}"
backend: "seq_probe"
max_batch_size: 8
sequence_batching {{
  {strategy}
  {LONG_IDLE}
  control_input [
    {_control("START", "CONTROL_SEQUENCE_START")},
    {_control("END", "CONTROL_SEQUENCE_END")},
    {_control("READY", "CONTROL_SEQUENCE_READY")},
    {_control("CORRID", "CONTROL_SEQUENCE_CORRID", data_type=corrid_type)}
  ]
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
}}
{_io("input", "INPUT", "TYPE_INT32")}
{_io("output", "OUTPUT", "TYPE_INT32")}
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
"""
    return None, cfg


def write_repo(models, dest=None):
    """models: {name: (onnx bytes, config text[, {relative path: bytes}])}."""
    dest = dest or tempfile.mkdtemp(prefix="cinfer-seq-")
    for name, spec in models.items():
        onnx_b, cfg = spec[0], spec[1]
        files = spec[2] if len(spec) > 2 else {}
        os.makedirs(os.path.join(dest, name, "1"), exist_ok=True)
        if onnx_b is not None:
            with open(os.path.join(dest, name, "1", "model.onnx"), "wb") as f:
                f.write(onnx_b)
        with open(os.path.join(dest, name, "config.pbtxt"), "w") as f:
            f.write(cfg)
        for rel, data in files.items():
            p = os.path.join(dest, name, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
    return dest
