"""ONNX element types through the engine, served by the real `cinfer serve` to tritonclient.http
and compared with ONNX Runtime (issue 19, item 8).

Every model is built here at test time with the onnx package:
  - Cast from every type to every type (BOOL, INT8..INT64, UINT8..UINT64, FP16, BF16, FP32,
    FP64, STRING), one model per source type with one output per destination;
  - Add/Sub/Mul/Div per numeric type (integers wrap in their width; FP16 rounds once);
  - STRING tensors through Identity and the shape operators, in and out of the graph;
  - models shaped like the ones Triton's QA generator writes (two inputs, Add and Sub, two
    outputs, Cast to the output types; our own writer, with Triton-style config.pbtxt);
  - refusals and hostile cases (Add of strings, a string that is not a number, Cast of a
    huge tensor to STRING).
Results are compared exactly: integers and strings byte for byte, floats bit for bit (NaN
equal to NaN, whatever its payload). Where ONNX Runtime has no kernel (BF16 arithmetic,
some integer widths) the reference is numpy's arithmetic in the same type (ml_dtypes for
BF16), and the test says which reference it used."""
import json
import os
import tempfile
import urllib.request

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from onnx import TensorProto as TP, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tritonclient.utils import InferenceServerException

from cinfer_server import Server

# name -> (ONNX type, numpy type, KServe datatype)
TYPES = {
    "bool": (TP.BOOL, np.bool_, "BOOL"),
    "int8": (TP.INT8, np.int8, "INT8"),
    "int16": (TP.INT16, np.int16, "INT16"),
    "int32": (TP.INT32, np.int32, "INT32"),
    "int64": (TP.INT64, np.int64, "INT64"),
    "uint8": (TP.UINT8, np.uint8, "UINT8"),
    "uint16": (TP.UINT16, np.uint16, "UINT16"),
    "uint32": (TP.UINT32, np.uint32, "UINT32"),
    "uint64": (TP.UINT64, np.uint64, "UINT64"),
    "float16": (TP.FLOAT16, np.float16, "FP16"),
    "float32": (TP.FLOAT, np.float32, "FP32"),
    "float64": (TP.DOUBLE, np.float64, "FP64"),
    "string": (TP.STRING, np.object_, "BYTES"),
}
NUMERIC = [t for t in TYPES if t not in ("bool", "string")]
INTS = [t for t in NUMERIC if not t.startswith("float")]
CAST_TYPES = list(TYPES) + ["bfloat16"]  # BF16 crosses ORT's numpy API as FP32 (below)

FLOAT_VALUES = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 3.7, -3.7, 100.7, -100.7, 127.9, 128.5,
                -128.9, 200.5, -200.5, 255.5, 256.5, 32767.5, 40000.25, 65504.0, 70000.7,
                -70000.0, 1e9, -1e9, 3e9, -3e9, 5e18, 1e19, 2e19, -1e19, 1e30, -1e30, 1e-8,
                0.1, 1 / 3, float("nan"), float("inf"), float("-inf"), 16777217.0, 1.0 + 2 ** -11,
                1.0 + 2 ** -11 + 2 ** -30]
STRING_VALUES = ["0", "1", "-1", "12", " 7", "+3", "300", "-129", "65536", "4294967296",
                 "3.7", "-2.5", "1e3", "0x10", "12abc", "5 ", "-9223372036854775808",
                 "9223372036854775807", "00042", "127", "-128", "255", "32768"]


def values(name, n=64, seed=0):
    """Test values of a type: the edges every cast and wrap-around rule turns on, then random."""
    rng = np.random.default_rng(seed)
    if name == "string":
        base = STRING_VALUES
        return np.array((base * (n // len(base) + 1))[:n], dtype=np.object_)
    if name == "bool":
        return rng.integers(0, 2, n).astype(np.bool_)
    if name in ("float16", "float32", "float64", "bfloat16"):
        extra = list(rng.standard_normal(n) * 1000)
        v = np.array((FLOAT_VALUES + extra)[:n], np.float64)
        return v.astype(np.float32) if name == "bfloat16" else v.astype(TYPES[name][1])
    info = np.iinfo(TYPES[name][1])
    edges = [info.min, info.max, 0, 1, -1, 127, 128, 255, 256, 32767, 32768, 65535, 65536,
             2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53 + 1, 2 ** 63 - 1, -2 ** 31,
             -(2 ** 63), 16777217, 65519, 65520]
    edges = [e % (1 << (8 * np.dtype(info.dtype).itemsize)) if info.min == 0 else e for e in edges]
    edges = [np.array(e).astype(np.int64 if info.min < 0 else np.uint64).astype(info.dtype) for e in edges]
    rnd = rng.integers(info.min, info.max, n, dtype=info.dtype, endpoint=True)
    return np.concatenate([np.array(edges, info.dtype), rnd])[:n]


def model_bytes(nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    onnx.checker.check_model(m)
    return m


def vi(name, t, shape):
    onnx_t = TP.BFLOAT16 if t == "bfloat16" else TYPES[t][0]
    return helper.make_tensor_value_info(name, onnx_t, shape)


def onnx_type(t):
    return TP.BFLOAT16 if t == "bfloat16" else TYPES[t][0]


# ---- models -------------------------------------------------------------------------------

def cast_model(src, n):
    """x: src [n] -> y_<dst> = Cast(x, dst) for every dst. BF16 crosses the graph boundary as
    FP32 (x_f32 -> Cast BF16 -> ...; ... -> Cast BF16 -> Cast FP32), so ORT can be fed."""
    nodes, outs = [], []
    x = "x"
    if src == "bfloat16":
        nodes.append(helper.make_node("Cast", ["x"], ["xb"], to=TP.BFLOAT16, name="in_bf16"))
        x = "xb"
    for dst in CAST_TYPES:
        if dst == "bfloat16":
            nodes.append(helper.make_node("Cast", [x], ["yb"], to=TP.BFLOAT16, name="to_bf16"))
            nodes.append(helper.make_node("Cast", ["yb"], ["y_bfloat16"], to=TP.FLOAT, name="bf16_f32"))
            outs.append(vi("y_bfloat16", "float32", [n]))
        else:
            nodes.append(helper.make_node("Cast", [x], [f"y_{dst}"], to=TYPES[dst][0], name=f"to_{dst}"))
            outs.append(vi(f"y_{dst}", dst, [n]))
    return model_bytes(nodes, [vi("x", "float32" if src == "bfloat16" else src, [n])], outs)


def binary_model(op, t):
    """y = a OP b with b broadcast over the rows; BF16: FP32 in and out, BF16 inside."""
    if t == "bfloat16":
        nodes = [helper.make_node("Cast", ["a"], ["ab"], to=TP.BFLOAT16),
                 helper.make_node("Cast", ["b"], ["bb"], to=TP.BFLOAT16),
                 helper.make_node(op, ["ab", "bb"], ["yb"], name="op"),
                 helper.make_node("Cast", ["yb"], ["y"], to=TP.FLOAT)]
        t = "float32"
    else:
        nodes = [helper.make_node(op, ["a", "b"], ["y"], name="op")]
    return model_bytes(nodes, [vi("a", t, [4, 16]), vi("b", t, [16])], [vi("y", t, [4, 16])])


def string_models():
    """STRING through Identity and the shape operators; each takes x: STRING [2, 3, 4]."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    const_s = numpy_helper.from_array(np.array([["c0", "c\u00e91", "", "c3"]] * 3, dtype=np.object_)
                                      .reshape(1, 3, 4), "cs")
    mk = helper.make_node
    X = [vi("x", "string", [2, 3, 4])]
    S = lambda shape, name="y": [vi(name, "string", shape)]
    return {
        "s_identity": model_bytes([mk("Identity", ["x"], ["y"])], X, S([2, 3, 4])),
        "s_reshape": model_bytes([mk("Reshape", ["x", "sh"], ["y"])], X, S([4, 6]), [i64("sh", [4, -1])]),
        "s_flatten": model_bytes([mk("Flatten", ["x"], ["y"], axis=2)], X, S([6, 4])),
        "s_unsqueeze": model_bytes([mk("Unsqueeze", ["x", "ax"], ["y"])], X, S([2, 1, 3, 4]), [i64("ax", [1])]),
        "s_squeeze": model_bytes([mk("Unsqueeze", ["x", "ax"], ["u"]), mk("Squeeze", ["u", "ax"], ["y"])],
                                 X, S([2, 3, 4]), [i64("ax", [0])]),
        "s_concat": model_bytes([mk("Concat", ["x", "cs", "x"], ["y"], axis=0)], X, S([5, 3, 4]), [const_s]),
        "s_gather": model_bytes([mk("Gather", ["x", "ix"], ["y"], axis=2)], X, S([2, 3, 3]), [i64("ix", [3, 0, -1])]),
        "s_slice": model_bytes([mk("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], X, S([2, 2, 2]),
                               [i64("st", [1, 3]), i64("en", [3, 0]), i64("ax", [1, 2]), i64("sp", [1, -2])]),
        "s_transpose": model_bytes([mk("Transpose", ["x"], ["y"], perm=[2, 0, 1])], X, S([4, 2, 3])),
        "s_expand": model_bytes([mk("Gather", ["x", "i0"], ["g"], axis=0), mk("Expand", ["g", "sh"], ["y"])],
                                X, S([2, 3, 4]), [i64("i0", [0]), i64("sh", [2, 1, 1])]),
        "s_split": model_bytes([mk("Split", ["x", "sz"], ["y", "z"], axis=2)], X, S([2, 3, 1]) + S([2, 3, 3], "z"),
                               [i64("sz", [1, 3])]),
        "s_tile": model_bytes([mk("Tile", ["x", "rp"], ["y"])], X, S([2, 6, 4]), [i64("rp", [1, 2, 1])]),
        "s_where": model_bytes([mk("Where", ["c", "x", "cs"], ["y"])], X + [vi("c", "bool", [2, 3, 4])],
                               S([2, 3, 4]), [const_s]),
        "s_shape": model_bytes([mk("Shape", ["x"], ["y"])], X, [vi("y", "int64", [3])]),
        "s_cast_roundtrip": model_bytes([mk("Cast", ["x"], ["n"], to=TP.INT32), mk("Add", ["n", "one"], ["p"]),
                                         mk("Cast", ["p"], ["y"], to=TP.STRING)], X, S([2, 3, 4]),
                                        [numpy_helper.from_array(np.array(1, np.int32), "one")]),
    }


def qa_add_sub_model(tin, tout0, tout1, batch):
    """Shaped like Triton's QA generator's add_sub models (our writer): INPUT0/INPUT1 -> Identity,
    or Cast to INT32 for INT8/INT16/STRING inputs -> Add (CAST0) and Sub (CAST1) -> Cast to each
    output type (Identity for an FP16 output of an FP16 model). Dims [16], batch dim 'N'."""
    mk = helper.make_node
    shape = (["N"] if batch else []) + [16]
    work = "int32" if tin in ("int8", "int16", "string") else tin
    pre = [mk("Identity", [f"INPUT{i}"], [f"_INPUT{i}"]) if work == tin else
           mk("Cast", [f"INPUT{i}"], [f"_INPUT{i}"], to=TP.INT32) for i in range(2)]
    post = []
    for k, (op, to) in enumerate([("Add", tout0), ("Sub", tout1)]):
        post.append(mk(op, ["_INPUT0", "_INPUT1"], [f"CAST{k}"]))
        post.append(mk("Identity", [f"CAST{k}"], [f"OUTPUT{k}"]) if tin == "float16" and to == tin else
                    mk("Cast", [f"CAST{k}"], [f"OUTPUT{k}"], to=TYPES[to][0]))
    return model_bytes(pre + post, [vi("INPUT0", tin, shape), vi("INPUT1", tin, shape)],
                       [vi("OUTPUT0", tout0, shape), vi("OUTPUT1", tout1, shape)], opset=13)


# the type combinations gen_qa_models.py makes for ONNX (it makes none with UINT8 inputs:
# ONNX's Sub has no UINT8 before opset 14)
QA_COMBOS = [("int8", "int8", "int8"), ("int16", "int16", "int16"),
             ("int32", "int32", "int32"), ("int64", "int64", "int64"),
             ("float16", "float16", "float16"), ("float32", "float32", "float32"),
             ("float16", "float32", "float32"), ("int32", "int8", "int8"), ("int8", "int32", "int32"),
             ("int32", "int8", "int16"), ("float32", "uint8", "uint8"), ("float32", "uint8", "float16"), ("int32", "float32", "float32"),
             ("float32", "int32", "int32"), ("int32", "float16", "int16"),
             ("string", "int32", "int32"), ("string", "string", "string"),
             ("string", "int32", "string"), ("string", "string", "int32"),
             ("int32", "string", "string"), ("int32", "int32", "string"), ("int32", "string", "int32")]


def qa_name(c, batch):
    return ("qa_" if batch else "qa_nobatch_") + "_".join(c)


def qa_config(name, c, batch):
    cfg = [f'name: "{name}"', 'platform: "onnxruntime_onnx"', f"max_batch_size: {8 if batch else 0}"]
    for k in range(2):
        cfg.append(f'input [{{ name: "INPUT{k}" data_type: TYPE_{TYPES[c[0]][2].replace("BYTES", "STRING")} dims: [ 16 ] }}]')
    for k in range(2):
        cfg.append(f'output [{{ name: "OUTPUT{k}" data_type: TYPE_{TYPES[c[k + 1]][2].replace("BYTES", "STRING")} dims: [ 16 ] }}]')
    return "\n".join(cfg) + "\n"


# hostile and refused models
def refused_models():
    mk = helper.make_node
    return {
        # Add does not take strings: refused at load, naming the node, input and type
        "bad_add_strings": model_bytes([mk("Add", ["x", "x"], ["y"], name="add_s")],
                                       [vi("x", "string", [3])], [vi("y", "string", [3])]),
        # a Cast of a huge tensor to STRING: the descriptors alone pass the 4 GiB tensor limit
        "huge_cast": model_bytes([mk("Expand", ["x", "sh"], ["e"], name="expand"),
                                  mk("Cast", ["e"], ["y"], to=TP.STRING, name="cast_huge")],
                                 [vi("x", "uint8", [1])], [vi("y", "string", [1 << 29])],
                                 [numpy_helper.from_array(np.array([1 << 29], np.int64), "sh")]),
    }


def all_models():
    ms = {f"cast_{s}": cast_model(s, 64) for s in CAST_TYPES}
    for op in ("Add", "Sub", "Mul", "Div"):
        for t in NUMERIC + ["bfloat16"]:
            ms[f"{op.lower()}_{t}"] = binary_model(op, t)
    ms.update(string_models())
    ms.update(refused_models())
    return ms


MODELS = all_models()


@pytest.fixture(scope="module")
def server():
    repo = tempfile.mkdtemp(prefix="cinfer-types-")
    for name, m in MODELS.items():
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write('platform: "onnxruntime_onnx"\nmax_batch_size: 0\n')
        onnx.save(m, os.path.join(repo, name, "1", "model.onnx"))
    for c in QA_COMBOS:
        for batch in (True, False):
            name = qa_name(c, batch)
            os.makedirs(os.path.join(repo, name, "1"))
            with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
                f.write(qa_config(name, c, batch))
            onnx.save(qa_add_sub_model(*c, batch), os.path.join(repo, name, "1", "model.onnx"))
    # STRING in and out through the dynamic batcher (requests of 1-3 rows batched together)
    dyn = ("string", "string", "int32")
    os.makedirs(os.path.join(repo, "qa_dynamic", "1"))
    with open(os.path.join(repo, "qa_dynamic", "config.pbtxt"), "w") as f:
        f.write(qa_config("qa_dynamic", dyn, True) + "dynamic_batching { max_queue_delay_microseconds: 20000 }\n")
    onnx.save(qa_add_sub_model(*dyn, True), os.path.join(repo, "qa_dynamic", "1", "model.onnx"))
    with Server(repo) as s:
        # not wait_ready(): bad_add_strings is UNAVAILABLE on purpose, so the server is not
        # ready (as Triton); it listens once the startup loads are done
        yield s


@pytest.fixture(scope="module")
def client(server):
    c = httpclient.InferenceServerClient(server.hostport)
    yield c
    c.close()


def infer(client, name, feeds, onnx_model):
    """feeds: {input name: numpy array}; returns {output name: numpy array} from cinfer."""
    types = {i.name: i.type.tensor_type.elem_type for i in onnx_model.graph.input}
    by_onnx = {v[0]: v[2] for v in TYPES.values()}
    inputs = []
    for k, v in feeds.items():
        dt = by_onnx[types[k]]
        i = httpclient.InferInput(k, list(v.shape), dt)
        i.set_data_from_numpy(v, binary_data=True)
        inputs.append(i)
    outs = [httpclient.InferRequestedOutput(o.name, binary_data=True) for o in onnx_model.graph.output]
    res = client.infer(name, inputs, outputs=outs)
    return {o.name: res.as_numpy(o.name) for o in onnx_model.graph.output}


def ort_run(m, feeds):
    """ONNX Runtime's outputs, or None when it has no kernel for the model."""
    try:
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # NOT_IMPLEMENTED: no kernel for this type
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            return None
        raise
    ort_feeds = {k: (v.astype(str) if v.dtype == np.object_ else v) for k, v in feeds.items()}
    return dict(zip([o.name for o in m.graph.output], s.run(None, ort_feeds)))


def as_bytes_list(a):
    return [x if isinstance(x, bytes) else str(x).encode() for x in np.asarray(a).ravel()]


def assert_same(got, want, what):
    """Exact: strings byte for byte, numbers bit for bit (every NaN equal to every NaN)."""
    assert got is not None, what
    want = np.asarray(want)
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {got.shape} vs {want.shape}"
    if want.dtype == np.object_ or got.dtype == np.object_:
        g, w = as_bytes_list(got), as_bytes_list(want)
        bad = [i for i in range(len(w)) if g[i] != w[i]]
        assert not bad, f"{what}: {len(bad)} strings differ, first at {bad[0]}: {g[bad[0]]!r} vs {w[bad[0]]!r}"
        return
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    g, w = got.ravel(), want.ravel()
    if got.dtype.kind == "f":
        nan = np.isnan(g) & np.isnan(w)
        g, w = np.where(nan, 0, g).astype(got.dtype), np.where(nan, 0, w).astype(got.dtype)
    bad = [i for i in range(len(w)) if g[i:i + 1].tobytes() != w[i:i + 1].tobytes()]
    assert not bad, f"{what}: {len(bad)} of {len(w)} differ, first at {bad[0]}: {got.ravel()[bad[0]]!r} vs {want.ravel()[bad[0]]!r}"


# ---- Cast -----------------------------------------------------------------------------------

@pytest.mark.parametrize("src", CAST_TYPES)
def test_cast_every_pair_matches_onnxruntime(client, src):
    m = MODELS[f"cast_{src}"]
    x = values(src)
    got = infer(client, f"cast_{src}", {"x": x}, m)
    want = ort_run(m, {"x": x})
    assert want is not None, "ONNX Runtime implements Cast for every pair"
    for dst in CAST_TYPES:
        assert_same(got[f"y_{dst}"], want[f"y_{dst}"], f"Cast {src} -> {dst}")


def test_cast_string_that_is_not_a_number(client):
    m = MODELS["cast_string"]
    x = values("string")
    x[5] = "twelve"
    with pytest.raises(InferenceServerException) as e:
        infer(client, "cast_string", {"x": x}, m)
    msg = str(e.value)
    print(msg)
    assert "node 'to_bool' (Cast): element 5: 'twelve' is not an integer (BOOL)" in msg, msg
    assert e.value.status() == "400", msg
    # ONNX Runtime refuses it too (std::stoll throws)
    with pytest.raises(Exception):
        ort_run(m, {"x": x})
    # the model still answers good requests
    got = infer(client, "cast_string", {"x": values("string")}, m)
    assert got["y_int32"][:4].tolist() == [0, 1, -1, 12]


# ---- elementwise arithmetic per type --------------------------------------------------------

def numpy_ref(op, a, b, t):
    """ONNX semantics in numpy: integers wrap in their width, Div truncates toward zero;
    BF16 as ml_dtypes rounds it (the float result rounded once)."""
    if t == "bfloat16":
        bf = ml_dtypes.bfloat16
        a, b = a.astype(bf).astype(np.float32), b.astype(bf).astype(np.float32)
        r = {"Add": a + b, "Sub": a - b, "Mul": a * b, "Div": a / b}[op]
        return r.astype(bf).astype(np.float32)
    with np.errstate(over="ignore"):
        if op == "Add":
            return a + b
        if op == "Sub":
            return a - b
        if op == "Mul":
            return a * b
        if np.issubdtype(a.dtype, np.integer):
            q = np.abs(a.astype(object)) // np.abs(b.astype(object))
            sign = np.where((a < 0) != (b < 0), -1, 1)
            return np.array([int(v) for v in (q * sign).ravel()], dtype=object).reshape(q.shape) \
                .astype(np.int64 if np.issubdtype(a.dtype, np.signedinteger) else np.uint64).astype(a.dtype)
        return a / b


@pytest.mark.parametrize("t", NUMERIC + ["bfloat16"])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_elementwise_per_type(client, op, t):
    name = f"{op.lower()}_{t}"
    m = MODELS[name]
    a = values(t, 64, seed=1).reshape(4, 16)
    b = values(t, 16, seed=2)
    if op == "Div" and t in INTS:  # no division by zero (ORT raises SIGFPE), nor MIN / -1
        b = np.where((b == 0) | (b == np.array(-1).astype(b.dtype)), np.array(3, b.dtype), b)
    got = infer(client, name, {"a": a, "b": b}, m)["y"]
    want = ort_run(m, {"a": a, "b": b})
    if want is not None:
        assert_same(got, want["y"], f"{op} {t} vs ONNX Runtime")
    # ONNX's own semantics, whether ORT has the kernel or not
    if t != "float16" or op != "Div":  # numpy's float16 divide is not correctly rounded
        assert_same(got, numpy_ref(op, a, b, t), f"{op} {t} vs numpy")


def test_fp16_rounds_once_on_store(client):
    # 1 + 2^-11 is a tie between two FP16 values: computed in float and rounded to even once
    m = MODELS["add_float16"]
    a = np.full((4, 16), 1.0, np.float16)
    b = np.full(16, 2 ** -11, np.float16)
    b[1] = np.float16(2 ** -11 + 2 ** -21)  # just above the tie (an FP16 subnormal-free value)
    got = infer(client, "add_float16", {"a": a, "b": b}, m)["y"]
    assert got[0, 0] == np.float16(1.0) and got[0, 1] == np.float16(1.0 + 2 ** -10)
    assert_same(got, ort_run(m, {"a": a, "b": b})["y"], "FP16 tie")


# ---- STRING through the graph ---------------------------------------------------------------

def string_input(seed=0):
    rng = np.random.default_rng(seed)
    words = ["", "a", "hello", "na\u00efve \u2603", "tab\tquote\"back\\", "x" * 300, "12", "-7"]
    return np.array([words[i] for i in rng.integers(0, len(words), 24)], dtype=np.object_).reshape(2, 3, 4)


@pytest.mark.parametrize("name", sorted(string_models()))
def test_string_operators_match_onnxruntime(client, name):
    m = MODELS[name]
    feeds = {"x": string_input()}
    if name == "s_cast_roundtrip":
        feeds["x"] = np.array([str(v) for v in np.random.default_rng(3).integers(-500, 500, 24)],
                              dtype=np.object_).reshape(2, 3, 4)
    if name == "s_where":
        feeds["c"] = np.random.default_rng(4).integers(0, 2, (2, 3, 4)).astype(np.bool_)
    # cinfer receives UTF-8 bytes, ORT str: the same strings
    enc = {k: (np.array([s.encode() for s in v.ravel()], dtype=np.object_).reshape(v.shape)
               if v.dtype == np.object_ else v) for k, v in feeds.items()}
    got = infer(client, name, enc, m)
    want = ort_run(m, feeds)
    ref = dict(zip([o.name for o in m.graph.output], ReferenceEvaluator(m).run(None, feeds)))
    assert want is not None
    for o in m.graph.output:
        assert_same(got[o.name], ref[o.name], f"{name} {o.name} vs the onnx reference")
        if name != "s_expand":  # ORT 1.32's Expand of strings returns empty strings past the first
            assert_same(got[o.name], want[o.name], f"{name} {o.name} vs ONNX Runtime")


def repository_index(server):
    req = urllib.request.Request(server.url + "/v2/repository/index", data=b"{}", method="POST")
    with urllib.request.urlopen(req) as r:
        return {m["name"]: m for m in json.load(r)}


def test_operator_that_cannot_take_strings_is_refused_at_load(server):
    st = repository_index(server)["bad_add_strings"]
    assert st["state"] == "UNAVAILABLE"
    assert "node 'add_s' (Add): input 0 ('x') is STRING; Add does not take strings" in st["reason"], st


def test_cast_of_a_huge_tensor_to_string_is_refused(client):
    m = MODELS["huge_cast"]
    with pytest.raises(InferenceServerException) as e:
        infer(client, "huge_cast", {"x": np.array([7], np.uint8)}, m)
    assert "node 'cast_huge' (Cast): output 0 is too large" in str(e.value), str(e.value)
    # the server keeps serving
    got = infer(client, "s_identity", {"x": np.array([b"ok"] * 24, dtype=np.object_).reshape(2, 3, 4)},
                MODELS["s_identity"])
    assert got["y"].ravel()[0] == b"ok"


def test_bytes_input_with_length_past_the_end_is_400(server):
    # a raw binary BYTES input whose second element's length prefix runs past its bytes
    data = (3).to_bytes(4, "little") + b"abc" + (200).to_bytes(4, "little") + b"xy"
    hdr = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [2, 3, 4],
                                  "parameters": {"binary_data_size": len(data)}}]}).encode()
    req = urllib.request.Request(server.url + "/v2/models/s_identity/infer", data=hdr + data,
                                 headers={"Inference-Header-Content-Length": str(len(hdr))}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 400
    assert "x" in e.value.read().decode()


# ---- models shaped like Triton's QA generator's -----------------------------------------------

def qa_inputs(tin, batch, seed=0):
    rng = np.random.default_rng(seed)
    shape = ([3] if batch else []) + [16]
    if tin == "string":
        return [np.array([str(v).encode() for v in rng.integers(-100, 100, int(np.prod(shape)))],
                         dtype=np.object_).reshape(shape) for _ in range(2)]
    if tin.startswith("float"):
        return [(rng.standard_normal(shape) * 8).astype(TYPES[tin][1]) for _ in range(2)]
    info = np.iinfo(TYPES[tin][1])
    lo, hi = (0, 60) if info.min == 0 else (-60, 60)
    return [rng.integers(lo, hi, shape).astype(TYPES[tin][1]) for _ in range(2)]


def qa_expected(c, x0, x1):
    """The outputs by ONNX's rules in numpy: in the working type (INT32 for INT8/INT16/STRING
    inputs), then cast to the output types (strings: decimal text)."""
    tin = c[0]
    if tin == "string":
        x0, x1 = (np.array([int(v) for v in x.ravel()], np.int32).reshape(x.shape) for x in (x0, x1))
    elif tin in ("int8", "int16"):
        x0, x1 = x0.astype(np.int32), x1.astype(np.int32)
    with np.errstate(over="ignore"):
        res = [x0 + x1, x0 - x1]
    outs = []
    for r, to in zip(res, c[1:]):
        if to == "string":
            outs.append(np.array([str(v).encode() for v in r.ravel()], dtype=np.object_).reshape(r.shape))
        else:
            outs.append(r.astype(TYPES[to][1]))
    return outs


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "nobatch"])
@pytest.mark.parametrize("combo", QA_COMBOS, ids=["_".join(c) for c in QA_COMBOS])
def test_qa_shaped_add_sub(client, combo, batch):
    name = qa_name(combo, batch)
    assert client.is_model_ready(name), name
    md = client.get_model_metadata(name)
    assert [o["datatype"] for o in md["outputs"]] == [TYPES[t][2] for t in combo[1:]]
    x0, x1 = qa_inputs(combo[0], batch)
    inputs = []
    for k, x in enumerate((x0, x1)):
        i = httpclient.InferInput(f"INPUT{k}", list(x.shape), TYPES[combo[0]][2])
        i.set_data_from_numpy(x, binary_data=True)
        inputs.append(i)
    res = client.infer(name, inputs)
    got = [res.as_numpy("OUTPUT0"), res.as_numpy("OUTPUT1")]
    want = qa_expected(combo, x0, x1)
    m = qa_add_sub_model(*combo, batch)
    ort_out = ort_run(m, {"INPUT0": x0, "INPUT1": x1})
    for k in range(2):
        assert_same(got[k], want[k], f"{name} OUTPUT{k} vs ONNX semantics")
        if combo[0] == "float16" and combo[k + 1] != "float16":
            # ORT computes FP16 Add/Sub in float and drops the FP16 rounding when the result
            # is cast to float (its Cast fusion); ONNX rounds. Within half an FP16 ulp of ORT.
            np.testing.assert_allclose(got[k], ort_out[f"OUTPUT{k}"], rtol=2 ** -11, atol=0)
        else:
            assert_same(got[k], ort_out[f"OUTPUT{k}"], f"{name} OUTPUT{k} vs ONNX Runtime")


# ---- `cinfer run` (the ONNX test runner) on STRING and FP16 test data -----------------------

def write_pb(path, arr, name):
    t = numpy_helper.from_array(arr, name)
    with open(path, "wb") as f:
        f.write(t.SerializeToString())


@pytest.mark.parametrize("name", ["s_concat", "add_float16", "cast_float32"])
def test_cinfer_run_compares_strings_and_fp16(name, tmp_path):
    import subprocess
    from cinfer_server import BIN
    m = MODELS[name]
    d = str(tmp_path)
    onnx.save(m, os.path.join(d, "model.onnx"))
    feeds = {"s_concat": {"x": string_input()},
             "add_float16": {"a": values("float16", 64, 1).reshape(4, 16), "b": values("float16", 16, 2)},
             "cast_float32": {"x": values("float32")}}[name]
    want = ort_run(m, feeds)
    ts = os.path.join(d, "test_data_set_0")
    os.makedirs(ts)
    for k, (n, v) in enumerate(feeds.items()):
        write_pb(os.path.join(ts, f"input_{k}.pb"), v, n)
    outs = [o.name for o in m.graph.output]
    for k, o in enumerate(outs):
        write_pb(os.path.join(ts, f"output_{k}.pb"), want[o], o)
    # atol/rtol 0: FP16 outputs must be exact; NaN equals NaN
    r = subprocess.run([BIN, "run", "--model", os.path.join(d, "model.onnx"), "--test-data-dir", d,
                        "--rtol", "0", "--atol", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and r.stdout.count("PASS") >= len(outs), r.stdout
    # a wrong expectation fails: one string / one FP16 value changed
    k = next(k for k, o in enumerate(outs) if want[o].dtype != np.bool_)
    o0 = want[outs[k]].copy()
    if o0.dtype == np.object_:
        o0.ravel()[3] = "not it"
    else:
        o0.ravel()[3] = o0.ravel()[3] + o0.dtype.type(1)
    write_pb(os.path.join(ts, f"output_{k}.pb"), o0, outs[k])
    r = subprocess.run([BIN, "run", "--model", os.path.join(d, "model.onnx"), "--test-data-dir", d,
                        "--rtol", "0", "--atol", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "FAIL" in r.stdout, r.stdout + r.stderr


def test_strings_through_the_dynamic_batcher(server):
    import concurrent.futures as cf
    combo = ("string", "string", "int32")
    c0 = httpclient.InferenceServerClient(server.hostport)
    before = c0.get_inference_statistics("qa_dynamic")["model_stats"][0]

    def one(i):
        c = httpclient.InferenceServerClient(server.hostport)
        x0, x1 = (x[: 1 + i % 3] for x in qa_inputs("string", True, seed=i))
        inputs = []
        for k, x in enumerate((x0, x1)):
            inp = httpclient.InferInput(f"INPUT{k}", list(x.shape), "BYTES")
            inp.set_data_from_numpy(x, binary_data=True)
            inputs.append(inp)
        res = c.infer("qa_dynamic", inputs)
        want = qa_expected(combo, x0, x1)
        assert_same(res.as_numpy("OUTPUT0"), want[0], f"request {i} OUTPUT0")
        assert_same(res.as_numpy("OUTPUT1"), want[1], f"request {i} OUTPUT1")
        c.close()
        return True

    n = 32
    with cf.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(one, range(n)))
    after = c0.get_inference_statistics("qa_dynamic")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == sum(1 + i % 3 for i in range(n))
    # concurrent requests were batched (so rows of several requests' strings shared a run)
    assert after["execution_count"] - before["execution_count"] < n
    c0.close()
