"""triton_python_backend_utils for cinfer's Python backend (written for cinfer; the API is
the one Triton's python_backend documents). A model.py does
`import triton_python_backend_utils as pb_utils` as on Triton.

The stub (cinfer_python_stub.py) creates this module in the stub process and sets `_conn`
to its connection to the server; the request, response sender and BLS classes talk to the
server through it. Tensors arrive in shared memory (memfd) and `as_numpy()` is a view on
it, without a copy. See docs/python-backend.md and docs/design/python-backend.md."""
import json
import struct
import sys
import threading

import numpy as np

_conn = None  # set by the stub

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# KServe datatype names <-> numpy, and Triton's numeric type codes (TRITONSERVER_DataType,
# which cinfer_dtype numbers equal).
_KSERVE_TO_NP = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
    "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
    "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
    "BYTES": np.object_,
}
_CODE_TO_KSERVE = {1: "BOOL", 2: "UINT8", 3: "UINT16", 4: "UINT32", 5: "UINT64", 6: "INT8",
                   7: "INT16", 8: "INT32", 9: "INT64", 10: "FP16", 11: "FP32", 12: "FP64",
                   13: "BYTES", 14: "BF16"}
_KSERVE_TO_CODE = {v: k for k, v in _CODE_TO_KSERVE.items()}


_DTYPE_NAMES = {}  # np.dtype -> KServe name (or None): filled as dtypes are seen


def _np_to_kserve(dt):
    try:
        return _DTYPE_NAMES[dt]
    except (KeyError, TypeError):
        pass
    key = dt
    dt = np.dtype(dt)
    name = None
    if dt == np.object_ or dt.type == np.bytes_:
        name = "BYTES"
    else:
        for k, v in _KSERVE_TO_NP.items():
            if v is not np.object_ and np.dtype(v) == dt:
                name = k
                break
    if len(_DTYPE_NAMES) < 256:
        try:
            _DTYPE_NAMES[key] = name
        except TypeError:
            pass
    return name


def triton_to_numpy_type(data_type):
    name = _CODE_TO_KSERVE.get(data_type)
    if name is None or name == "BF16":
        return None
    return _KSERVE_TO_NP[name]


def numpy_to_triton_type(data_type):
    name = _np_to_kserve(data_type)
    return _KSERVE_TO_CODE.get(name) if name else None


def triton_string_to_numpy(triton_type_string):
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor):
    """Flattens a BYTES tensor (numpy object or bytes_ array) into 4-byte length-prefixed
    elements in C order, as bytes."""
    if input_tensor.size == 0:
        return b""
    parts = []
    for obj in input_tensor.reshape(-1):
        if isinstance(obj, (bytes, bytearray, memoryview)):
            s = bytes(obj)
        elif isinstance(obj, np.bytes_):
            s = bytes(obj)
        else:
            s = str(obj).encode("utf-8")
        parts.append(struct.pack("<I", len(s)))
        parts.append(s)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor):
    strs = []
    offset = 0
    buf = memoryview(encoded_tensor)
    while offset < len(buf):
        (n,) = struct.unpack_from("<I", buf, offset)
        offset += 4
        if offset + n > len(buf):
            raise TritonModelException("a BYTES element runs past the end of the tensor")
        strs.append(bytes(buf[offset:offset + n]))
        offset += n
    return np.array(strs, dtype=np.object_)


def get_input_tensor_by_name(inference_request, name):
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name):
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config, name):
    for c in model_config.get("input", []):
        if c["name"] == name:
            return c
    return None


def get_output_config_by_name(model_config, name):
    for c in model_config.get("output", []):
        if c["name"] == name:
            return c
    return None


def using_decoupled_model_transaction_policy(model_config):
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class TritonModelException(Exception):
    pass


class TritonError:
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7
    _NAMES = {0: "UNKNOWN", 1: "INTERNAL", 2: "NOT_FOUND", 3: "INVALID_ARG", 4: "UNAVAILABLE",
              5: "UNSUPPORTED", 6: "ALREADY_EXISTS", 7: "CANCELLED"}

    def __init__(self, message, code=INTERNAL):
        self._message = str(message)
        self._code = code if code in TritonError._NAMES else TritonError.INTERNAL

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return f"TritonError({self._message!r}, {TritonError._NAMES[self._code]})"

    def _wire(self):
        return {"message": self._message, "code": TritonError._NAMES[self._code]}

    @staticmethod
    def _from_wire(e):
        codes = {v: k for k, v in TritonError._NAMES.items()}
        return TritonError(e.get("message", ""), codes.get(e.get("code"), TritonError.INTERNAL))


class _Capsule:
    """What np.from_dlpack needs around a bare DLPack capsule."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


class Tensor:
    def __init__(self, name, data, dtype=None):
        if not isinstance(name, str):
            raise TritonModelException("Tensor name must be a string")
        if not isinstance(data, np.ndarray):
            data = np.asarray(data)
        if data.dtype.type == np.str_:
            data = data.astype(np.object_)
        if _np_to_kserve(data.dtype) is None:
            raise TritonModelException(
                f"tensor '{name}': numpy dtype {data.dtype} has no Triton datatype")
        self._name = name
        self._np = data

    def name(self):
        return self._name

    def as_numpy(self):
        return self._np

    def shape(self):
        return list(self._np.shape)

    def triton_dtype(self):
        return _KSERVE_TO_CODE[_np_to_kserve(self._np.dtype)]

    def is_cpu(self):
        return True

    def to_dlpack(self):
        if self._np.dtype == np.object_:
            raise TritonModelException(f"tensor '{self._name}': BYTES tensors have no DLPack form")
        return self._np.__dlpack__()

    @staticmethod
    def from_dlpack(name, capsule):
        if hasattr(capsule, "__dlpack__"):
            arr = np.from_dlpack(capsule)
        else:
            arr = np.from_dlpack(_Capsule(capsule))
        return Tensor(name, arr)

    def __repr__(self):
        return f"Tensor({self._name!r}, {_np_to_kserve(self._np.dtype)}, {list(self._np.shape)})"


class InferenceResponse:
    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._outputs = list(output_tensors or [])
        for t in self._outputs:
            if not isinstance(t, Tensor):
                raise TritonModelException("output_tensors must be a list of pb_utils.Tensor")
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._error = error
        # Triton's stub: a dict with str keys and bool, int or str values (sent with the
        # response: its KServe "parameters"), or that dict as a JSON string.
        if parameters is None:
            parameters = {}
        if isinstance(parameters, str):
            try:
                parameters = json.loads(parameters)
            except ValueError as e:
                raise TritonModelException(f"parameters is not valid JSON: {e}") from None
        if not isinstance(parameters, dict):
            raise TritonModelException("parameters must be a dict, found type "
                                       f"{type(parameters).__name__}")
        for k, v in parameters.items():
            if not isinstance(k, str):
                raise TritonModelException("Expect parameters keys to have type str, found type "
                                           f"{type(k).__name__}")
            if not isinstance(v, (bool, int, str)):
                raise TritonModelException("Expect parameters values to have type bool/int/str, "
                                           f"found type {type(v).__name__}")
            if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**63:
                raise TritonModelException(f"parameter '{k}' does not fit in int64")
        self._params = parameters
        self._parameters = json.dumps(parameters)

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return self._parameters

    def _params_dict(self):
        return self._params

    def _set_params(self, params):
        self._params = params
        self._parameters = json.dumps(params)


class InferenceResponseSender:
    def __init__(self, request):
        self._request = request
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response=None, flags=0):
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed.")
            if response is not None and not isinstance(response, InferenceResponse):
                raise TritonModelException("send() takes a pb_utils.InferenceResponse or None")
            final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if response is None and not final:
                raise TritonModelException(
                    "Inference Response object must be provided when the response flags is "
                    "set to zero")
            if final:
                self._closed = True
                self._request._final_sent = True
        _conn.send_response(self._request._rid, response, final)

    def is_cancelled(self):
        return self._request.is_cancelled()


class InferenceRequest:
    """A request the model received (made by the stub), or a BLS request the model builds
    to call another model of the server."""

    def __init__(self, model_name=None, inputs=None, requested_output_names=None,
                 request_id="", correlation_id=0, flags=0, timeout=0, model_version=-1,
                 parameters=None, preferred_memory=None, trace=None, **kwargs):
        if kwargs:
            raise TritonModelException(
                "InferenceRequest: unexpected argument(s) " + ", ".join(sorted(kwargs)))
        if isinstance(model_name, (bytes, np.bytes_)):
            model_name = bytes(model_name).decode("utf-8")
        self._model_name = model_name
        self._inputs = list(inputs or [])
        self._requested = list(requested_output_names or [])
        self._request_id = request_id or ""
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        self._model_version = int(model_version)
        if parameters is None:
            parameters = {}
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        if not isinstance(parameters, dict):
            raise TritonModelException("parameters must be a dict or a JSON object string")
        self._parameters = parameters
        self._rid = None  # set for requests the model received
        self._sender = None
        self._final_sent = False

    def inputs(self):
        return self._inputs

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def flags(self):
        return self._flags

    def timeout(self):
        return self._timeout

    def model_name(self):
        return self._model_name

    def parameters(self):
        return json.dumps(self._parameters)

    def requested_output_names(self):
        return list(self._requested)

    def get_response_sender(self):
        if self._rid is None:
            raise TritonModelException("get_response_sender() is for requests the model received")
        if not _conn.decoupled:
            raise TritonModelException(
                "Unable to get the response sender: the model is not decoupled "
                "(model_transaction_policy { decoupled: true })")
        if self._sender is None:
            self._sender = InferenceResponseSender(self)
        return self._sender

    def is_cancelled(self):
        if self._rid is None:
            return False
        return _conn.is_cancelled(self._rid)

    def set_release_flags(self, flags):
        raise TritonModelException("set_release_flags (request rescheduling) is not supported by "
                                   "cinfer's Python backend")

    def _bls_message(self, decoupled):
        if not self._model_name:
            raise TritonModelException("InferenceRequest: model_name is required for exec()")
        for t in self._inputs:
            if not isinstance(t, Tensor):
                raise TritonModelException("inputs must be a list of pb_utils.Tensor")
        return {"model": self._model_name, "version": self._model_version,
                "id": self._request_id, "outputs": self._requested,
                "params": self._parameters, "decoupled": bool(decoupled),
                "timeout_us": int(self._timeout)}

    def exec(self, decoupled=False):
        """Runs the request on the server. Returns an InferenceResponse (its error() says
        what failed), or with decoupled=True an iterator of the responses."""
        it = _conn.infer(self._bls_message(decoupled), self._inputs)
        if decoupled:
            return it
        responses = list(it)
        return responses[-1] if responses else InferenceResponse(
            error=TritonError("no response"))

    async def async_exec(self, decoupled=False):
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self.exec(decoupled))


def _metric_call(msg):
    if _conn is None:
        raise TritonModelException("custom metrics need the server (the model runs outside it)")
    msg["type"] = "metric"
    hdr = _conn.call(msg)
    err = hdr.get("error")
    if err:
        raise TritonModelException(err.get("message", "custom metric error"))
    return hdr


class MetricFamily:
    """A family of custom metrics in the server's /metrics (Triton's Custom Metrics API).
    Families are known by name across the server: a second MetricFamily of the same name
    and kind is the same family; another kind is refused."""
    COUNTER = "COUNTER"
    GAUGE = "GAUGE"
    HISTOGRAM = "HISTOGRAM"

    def __init__(self, name, description, kind):
        if kind not in (MetricFamily.COUNTER, MetricFamily.GAUGE, MetricFamily.HISTOGRAM):
            raise TritonModelException(
                "MetricFamily kind must be MetricFamily.COUNTER, GAUGE or HISTOGRAM")
        if not isinstance(name, str) or not isinstance(description, str):
            raise TritonModelException("MetricFamily name and description must be strings")
        _metric_call({"op": "family", "name": name, "help": description, "kind": kind})
        self._name = name
        self._kind = kind

    def Metric(self, labels=None, buckets=None):
        return Metric(self, labels, buckets)


class Metric:
    """One labelled series of a MetricFamily: increment / set / observe / value."""

    def __init__(self, family, labels=None, buckets=None):
        if not isinstance(family, MetricFamily):
            raise TritonModelException("Metric needs a MetricFamily")
        if labels is None:
            labels = {}
        if not isinstance(labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TritonModelException("Metric labels must be a dict of str to str")
        if buckets is not None:
            buckets = [float(b) for b in buckets]
        self._kind = family._kind
        self._id = None
        hdr = _metric_call({"op": "new", "name": family._name, "labels": labels,
                            "buckets": buckets})
        self._id = int(hdr["id"])

    def _post(self, op, value):
        value = float(value)
        if value != value or value in (float("inf"), float("-inf")):
            raise TritonModelException(f"Metric {op}: the value must be a finite number")
        _conn.send({"type": "metric", "op": op, "id": self._id, "value": value})

    def increment(self, value):
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("increment() is not supported for HISTOGRAM metrics")
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("increment() of a COUNTER must not be negative")
        self._post("inc", value)

    def set(self, value):
        if self._kind != MetricFamily.GAUGE:
            raise TritonModelException("set() is only supported for GAUGE metrics")
        self._post("set", value)

    def observe(self, value):
        if self._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("observe() is only supported for HISTOGRAM metrics")
        self._post("observe", value)

    def value(self):
        if self._kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("value() is not supported for HISTOGRAM metrics")
        return float(_metric_call({"op": "value", "id": self._id})["value"])

    def __del__(self):
        try:
            if self._id is not None and _conn is not None:
                _conn.send({"type": "metric", "op": "delete", "id": self._id})
        except Exception:
            pass


class Logger:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3

    @staticmethod
    def log(message, level=0):
        name = {0: "info", 1: "warn", 2: "error", 3: "verbose"}.get(level, "info")
        if _conn is not None:
            _conn.log(name, str(message))
        else:
            print(message, file=sys.stderr)

    @staticmethod
    def log_info(message):
        Logger.log(message, Logger.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, Logger.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, Logger.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, Logger.VERBOSE)


class ModelConfig:
    """The config handed to auto_complete_config. The changes are recorded and applied by
    the server through its auto-complete setters (which validate them again)."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config) if isinstance(model_config, str) \
            else model_config
        self._ops = []

    def as_dict(self):
        return self._model_config

    def set_max_batch_size(self, max_batch_size):
        cur = self._model_config.get("max_batch_size", 0)
        if cur > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {cur}, but in auto-complete-config "
                f"function for model '{self._model_config.get('name')}' specified "
                f"max_batch_size {max_batch_size}")
        self._model_config["max_batch_size"] = max_batch_size
        self._ops.append({"op": "max_batch_size", "value": int(max_batch_size)})

    def set_dynamic_batching(self):
        for s in ("sequence_batching", "ensemble_scheduling"):
            if self._model_config.get(s):
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{s}', but auto-complete-"
                    f"config function for model '{self._model_config.get('name')}' tries to "
                    "set scheduling_choice as 'dynamic_batching'")
        if "dynamic_batching" not in self._model_config:
            self._model_config["dynamic_batching"] = {}
        self._ops.append({"op": "dynamic_batching"})

    def _add_io(self, side, io):
        valid = ["name", "data_type", "dims", "optional"] if side == "input" else \
            ["name", "data_type", "dims"]
        for p in io:
            if p not in valid:
                raise ValueError(f"{side} '{io.get('name')}' in auto-complete-config function "
                                 f"for model '{self._model_config.get('name')}' contains "
                                 f"property other than {', '.join(valid)}.")
        for p in ("name", "data_type", "dims"):
            if p not in io:
                raise ValueError(f"{side} '{io.get('name')}' in auto-complete-config function "
                                 f"for model '{self._model_config.get('name')}' is missing "
                                 f"'{p}' property.")
        lst = self._model_config.setdefault(side, [])
        for have in lst:
            if have["name"] == io["name"]:
                if have.get("data_type") not in (None, "TYPE_INVALID", io["data_type"]) or (
                        have.get("dims") and [int(d) for d in have["dims"]] !=
                        [int(d) for d in io["dims"]]):
                    raise ValueError(
                        f"Unable to add {side} '{io['name']}' for model "
                        f"'{self._model_config.get('name')}': an {side} of that name exists "
                        "with another data_type or dims")
                return
        lst.append(dict(io))
        self._ops.append({"op": "add_" + side, "name": io["name"], "data_type": io["data_type"],
                          "dims": [int(d) for d in io["dims"]]})

    def add_input(self, input):
        self._add_io("input", input)

    def add_output(self, output):
        self._add_io("output", output)

    def set_model_transaction_policy(self, transaction_policy_dict):
        for k in transaction_policy_dict:
            if k != "decoupled":
                raise ValueError(f"model transaction property '{k}' is not supported "
                                 "(only 'decoupled')")
        d = bool(transaction_policy_dict.get("decoupled", False))
        self._model_config.setdefault("model_transaction_policy", {})["decoupled"] = d
        self._ops.append({"op": "decoupled", "value": d})
