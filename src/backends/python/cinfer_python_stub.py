# cinfer_python_stub.py: the process that runs one instance of a Python model for cinfer's
# python backend (docs/design/python-backend.md). The server starts it as
#   <python> -c <this source> <source of triton_python_backend_utils> <socket fd>
# and talks to it over a SOCK_SEQPACKET socket: one JSON header per message, tensor bytes
# in a memfd passed along with it (SCM_RIGHTS). Two sockets: the main thread's (fd 3:
# init, execute, finalize and whatever the main thread sends or calls while running them,
# which the server's instance worker reads itself) and the other threads' (fd 4: decoupled
# response senders, async_exec, ..., read by the server's reader thread). No reader
# thread here: whichever thread waits for a message of a socket reads it (leader/
# follower) and hands what is meant for others to them, so a request costs one wake-up on
# each side. A watchdog thread only polls for the server's hang-up (POLLHUP), to exit when
# the server is gone while execute() runs.
import array
import asyncio
import collections
import inspect
import importlib.util
import json
import mmap
import os
import select
import socket
import sys
import threading
import traceback
import types

_MAX_MSG = 1 << 17
_ALIGN = 64

utils_src, main_fd, other_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pb = types.ModuleType("triton_python_backend_utils")
pb.__file__ = "triton_python_backend_utils.py"
exec(compile(utils_src, "triton_python_backend_utils.py", "exec"), pb.__dict__)
sys.modules["triton_python_backend_utils"] = pb
np = pb.np


def _fmt_exc(e):
    return "".join(traceback.format_exception_only(type(e), e)).strip()


def _fill(mm, blobs):
    """Copies each (offset, bytes or ndarray) into the mapping: one memcpy each."""
    for o, data in blobs:
        if isinstance(data, bytes):
            if data:  # an empty tensor has nothing to copy (and may have no region at all)
                mm[o:o + len(data)] = data
        elif data.size:
            if not data.flags.c_contiguous:
                data = np.ascontiguousarray(data)
            mm[o:o + data.nbytes] = data


class Chan:
    """One socket to the server: sends under a lock; wait() is the leader/follower read."""

    def __init__(self, fd, decode, is_main):
        self.is_main = is_main
        self.sock = socket.socket(fileno=fd)
        self.send_lock = threading.Lock()
        self.cv = threading.Condition(threading.Lock())
        self.reading = False  # a thread is in recvmsg (under cv)
        self.calls = {}  # call id -> deque of (hdr, tensors) (under cv)
        self.main_box = collections.deque()  # (hdr, fd) for the main thread (under cv)
        self.fds_size = socket.CMSG_SPACE(array.array("i").itemsize * 4)
        self.decode = decode

    def sendmsg(self, body, anc):
        with self.send_lock:
            self.sock.sendmsg([body], anc)

    def _recv_one(self):
        """One message off the socket: (hdr, fd or None). The server gone: exit."""
        try:
            data, anc, flags, _ = self.sock.recvmsg(_MAX_MSG, self.fds_size)
            if not data:
                os._exit(1)
            fd = None
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(cdata[:len(cdata) - len(cdata) % got.itemsize])
                    for f in got:
                        if fd is None:
                            fd = f
                        else:
                            os.close(f)
            return json.loads(data), fd
        except Exception:
            traceback.print_exc()
            os._exit(1)

    def wait(self, box):
        """Waits until box (a call's deque, or main_box) has a message and takes it. When no
        other thread is reading the socket this one does, and hands what it reads for
        others to their boxes."""
        cv = self.cv
        with cv:
            while not box:
                if self.reading:
                    cv.wait()
                    continue
                self.reading = True
                cv.release()
                try:
                    hdr, fd = self._recv_one()
                    t = hdr.get("type")
                    tensors = self.decode(hdr, fd) if t in ("reply", "infer_response") else None
                except BaseException:
                    cv.acquire()
                    self.reading = False
                    cv.notify_all()
                    raise
                cv.acquire()
                self.reading = False
                if tensors is not None:
                    q = self.calls.get(hdr.get("call"))
                    if q is not None:
                        q.append((hdr, tensors))
                elif not self.is_main:
                    if fd is not None:  # the server sends nothing else unasked there
                        os.close(fd)
                else:
                    self.main_box.append((hdr, fd))
                cv.notify_all()
            return box.popleft()


class Conn:
    def __init__(self, main_fd, other_fd):
        self.main = Chan(main_fd, self._tensors, True)
        self.other = Chan(other_fd, self._tensors, False)
        self.main_thread = threading.main_thread()
        self.next_call = 1
        self.call_lock = threading.Lock()
        self.decoupled = False
        # reused shared memory of execute messages: the server's input region (mapped
        # here when a new generation's memfd arrives) and our output region
        self.in_mm, self.in_gen = None, 0
        self.out_mm, self.out_cap, self.out_gen = None, 0, 0

    # ---- sending -----------------------------------------------------------------------
    def send(self, hdr, tensors=(), reuse=False, chan=None):
        """tensors: list of (name, ndarray). Their bytes go to one memfd sent with hdr; with
        reuse (execute_done only: the server has copied the last one out before it sends
        the next execute) into the output region, whose memfd goes only when it is new.
        chan: the socket (default: the calling thread's)."""
        descs, blobs, off = [], [], 0
        for name, arr in tensors:
            dt = pb._np_to_kserve(arr.dtype)
            if dt is None:
                raise pb.TritonModelException(
                    f"tensor '{name}': numpy dtype {arr.dtype} has no Triton datatype")
            if dt == "BYTES":
                data = pb.serialize_byte_tensor(arr)
                size = len(data)
            else:
                data = arr
                size = arr.nbytes
            descs.append({"name": name, "datatype": dt, "shape": [int(d) for d in arr.shape],
                          "offset": off, "size": size})
            blobs.append((off, data))
            off += (size + _ALIGN - 1) // _ALIGN * _ALIGN
        hdr["tensors"] = descs
        body = json.dumps(hdr).encode()
        if len(body) > _MAX_MSG:
            raise pb.TritonModelException(f"message header of {len(body)} bytes is too large")
        fds = []
        if reuse:
            if off > self.out_cap:
                cap = max(off, 2 * self.out_cap, 65536)
                fd = os.memfd_create("cinfer-py-out", os.MFD_CLOEXEC)
                try:
                    os.ftruncate(fd, cap)
                    self.out_mm = mmap.mmap(fd, cap)
                except BaseException:
                    os.close(fd)
                    raise
                self.out_cap = cap
                self.out_gen += 1
                fds.append(fd)
            hdr["shm_gen"] = self.out_gen
            _fill(self.out_mm, blobs)
            body = json.dumps(hdr).encode()
        elif off > 0:
            fd = os.memfd_create("cinfer-py-out", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, off)
                mm = mmap.mmap(fd, off)
                _fill(mm, blobs)
                mm.close()
            except BaseException:
                os.close(fd)
                raise
            fds.append(fd)
        try:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
            (chan or self.chan()).sendmsg(body, anc)
        finally:
            for fd in fds:
                os.close(fd)

    def send_response(self, rid, response, final):
        hdr = {"type": "response", "rid": rid, "final": bool(final)}
        tensors = []
        if response is not None:
            if response.has_error():
                hdr["error"] = response.error()._wire()
            else:
                tensors = [(t.name(), t.as_numpy()) for t in response.output_tensors()]
                params = response._params_dict()
                if params:
                    hdr["params"] = params
        # Every decoupled response takes the other socket, whichever thread sends it: the
        # responses of one request (execute() may send some, a thread of the model the
        # rest) then reach the server in the order they were sent.
        self.send(hdr, tensors, chan=self.other)

    def log(self, level, msg):
        try:
            self.send({"type": "log", "level": level, "msg": msg})
        except OSError:
            pass

    # ---- calls that wait for the server ---------------------------------------------------
    def chan(self):
        """The main thread's socket for the main thread, the other one for the others."""
        return self.main if threading.current_thread() is self.main_thread else self.other

    def _new_call(self):
        q = collections.deque()
        ch = self.chan()
        with self.call_lock:
            cid = self.next_call
            self.next_call += 1
        with ch.cv:
            ch.calls[cid] = q
        return cid, (ch, q)

    @staticmethod
    def _end_call(cid, chq):
        ch = chq[0]
        with ch.cv:
            ch.calls.pop(cid, None)

    def is_cancelled(self, rid):
        cid, q = self._new_call()
        try:
            self.send({"type": "is_cancelled", "call": cid, "rid": rid})
            hdr, _ = q[0].wait(q[1])
            return bool(hdr.get("cancelled"))
        finally:
            self._end_call(cid, q)

    def call(self, msg):
        """Sends msg and waits for its reply (the header)."""
        cid, q = self._new_call()
        msg["call"] = cid
        try:
            self.send(msg)
            hdr, _ = q[0].wait(q[1])
            return hdr
        finally:
            self._end_call(cid, q)

    def infer(self, msg, inputs):
        cid, q = self._new_call()
        msg["type"] = "infer"
        msg["call"] = cid
        try:
            self.send(msg, [(t.name(), t.as_numpy()) for t in inputs])
        except BaseException:
            self._end_call(cid, q)
            raise
        return self._responses(cid, q, msg["decoupled"])

    def _responses(self, cid, q, decoupled):
        try:
            while True:
                hdr, tensors = q[0].wait(q[1])
                err = hdr.get("error")
                if err:
                    yield pb.InferenceResponse(error=pb.TritonError._from_wire(err))
                elif tensors or not hdr.get("final") or not decoupled:
                    # a decoupled stream's closing FINAL without outputs is not a response
                    resp = pb.InferenceResponse(
                        output_tensors=[pb.Tensor(n, a) for n, a in tensors])
                    # the called model's response parameters, as Triton gives them to BLS
                    resp._set_params(hdr.get("params") or {})
                    yield resp
                if hdr.get("final"):
                    return
        finally:
            self._end_call(cid, q)

    # ---- receiving ------------------------------------------------------------------------
    def _tensors(self, hdr, fd):
        out = []
        descs = hdr.get("tensors", [])
        gen = hdr.get("shm_gen")
        if gen is not None:  # the server's reused input region
            if fd is not None:
                try:
                    size = os.fstat(fd).st_size
                    self.in_mm, self.in_gen = mmap.mmap(fd, size), gen
                finally:
                    os.close(fd)
                fd = None
            if self.in_mm is not None and gen == self.in_gen:
                return self._decode(descs, self.in_mm, len(self.in_mm))
        if fd is None:
            for d in descs:
                if d["size"]:
                    raise RuntimeError("tensor bytes without shared memory")
                out.append((d["name"], self._empty(d)))
            return out
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size) if size else None
        finally:
            os.close(fd)
        return self._decode(descs, mm, size)

    def _decode(self, descs, mm, size):
        out = []
        for d in descs:
            o, n = int(d["offset"]), int(d["size"])
            if o < 0 or n < 0 or o + n > size:
                raise RuntimeError(f"tensor '{d['name']}' lies outside the shared memory")
            shape = [int(x) for x in d["shape"]]
            if d["datatype"] == "BYTES":
                arr = pb.deserialize_bytes_tensor(mm[o:o + n] if n else b"")
                if arr.size != int(np.prod(shape)):
                    raise RuntimeError(f"tensor '{d['name']}': element count != shape")
                arr = arr.reshape(shape)
            elif n == 0:
                arr = self._empty(d)
            else:
                dt = np.dtype(pb._KSERVE_TO_NP[d["datatype"]])
                arr = np.frombuffer(mm, dtype=dt, count=n // dt.itemsize, offset=o).reshape(shape)
            out.append((d["name"], arr))
        return out

    @staticmethod
    def _empty(d):
        if d["datatype"] == "BYTES":
            return np.empty([int(x) for x in d["shape"]], dtype=np.object_)
        return np.empty([int(x) for x in d["shape"]], dtype=pb._KSERVE_TO_NP[d["datatype"]])

    def watchdog(self):
        p = select.poll()
        for ch in (self.main, self.other):  # only POLLHUP / POLLERR: never woken by data
            p.register(ch.sock.fileno(), 0)
        while True:
            if p.poll():
                os._exit(1)

conn = Conn(main_fd, other_fd)
pb._conn = conn
loop = asyncio.new_event_loop()
asyncio.set_event_loop(loop)


def load_model_module(path):
    spec = importlib.util.spec_from_file_location("model", path)
    if spec is None:
        raise RuntimeError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["model"] = mod
    spec.loader.exec_module(mod)
    if not hasattr(mod, "TritonPythonModel"):
        raise RuntimeError(f"{path} defines no class TritonPythonModel")
    return mod


def err_wire(e, code="INTERNAL"):
    if isinstance(e, pb.TritonError):
        return e._wire()
    return {"message": str(e) if isinstance(e, pb.TritonModelException) else _fmt_exc(e),
            "code": code}


def decoupled_error(done, err):
    """execute() of a decoupled model failed: the error goes after the responses it sent
    (on the other socket, as they did), then execute_done tells the worker it returned."""
    conn.send({"type": "execute_error", "batch": done["batch"], "error": err}, chan=conn.other)
    conn.send(done)


def run_execute(model, hdr, fd):
    reqs = []
    try:
        tensors = conn._tensors(hdr, fd)
    except Exception as e:
        conn.send({"type": "execute_done", "batch": hdr["batch"],
                   "error": err_wire(e)})
        return
    by_rid = {}
    for r in hdr["requests"]:
        req = pb.InferenceRequest(request_id=r.get("id", ""), parameters=r.get("params", {}),
                                  requested_output_names=r.get("outputs", []),
                                  model_name=hdr.get("model"),
                                  flags=r.get("flags", 0), correlation_id=r.get("corrid", 0))
        req._rid = r["rid"]
        by_rid[r["rid"]] = req
        reqs.append(req)
    for (name, arr), d in zip(tensors, hdr.get("tensors", [])):
        by_rid[d["rid"]]._inputs.append(pb.Tensor(name, arr))
    done = {"type": "execute_done", "batch": hdr["batch"]}
    try:
        responses = model.execute(reqs)
        if inspect.iscoroutine(responses):  # async def execute (Triton allows it)
            responses = loop.run_until_complete(responses)
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if conn.decoupled:
            decoupled_error(done, err_wire(e))
        else:
            done["error"] = err_wire(e)
            conn.send(done)
        return
    finally:
        del reqs
    if conn.decoupled:
        if responses is not None:
            decoupled_error(done, {"message": "execute() of a decoupled model must return None "
                                              "(responses go through the response sender)",
                                   "code": "INTERNAL"})
        else:
            conn.send(done)
        return
    rids = [r["rid"] for r in hdr["requests"]]
    if not isinstance(responses, (list, tuple)) or len(responses) != len(rids):
        n = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
        done["error"] = {"message": f"execute() returned {n} responses for {len(rids)} requests "
                                    "(it must return a list with one InferenceResponse per "
                                    "request)", "code": "INTERNAL"}
        conn.send(done)
        return
    out, tensors = [], []
    for rid, resp in zip(rids, responses):
        ent = {"rid": rid}
        if not isinstance(resp, pb.InferenceResponse):
            ent["error"] = {"message": f"execute() returned a {type(resp).__name__}, not a "
                                       "pb_utils.InferenceResponse", "code": "INTERNAL"}
        elif resp.has_error():
            ent["error"] = resp.error()._wire()
        else:
            ent["first"] = len(tensors)
            ent["count"] = len(resp.output_tensors())
            params = resp._params_dict()
            if params:
                ent["params"] = params
            tensors.extend((t.name(), t.as_numpy()) for t in resp.output_tensors())
        out.append(ent)
    done["responses"] = out
    try:
        conn.send(done, tensors, reuse=True)
    except Exception as e:
        conn.send({"type": "execute_done", "batch": hdr["batch"], "error": err_wire(e)})


def main():
    threading.Thread(target=conn.watchdog, daemon=True).start()
    model = None
    mod = None
    while True:
        hdr, fd = conn.main.wait(conn.main.main_box)
        t = hdr.get("type")
        try:
            if t == "exit":
                os._exit(0)
            elif t == "autocomplete":
                try:
                    mod = load_model_module(hdr["model_file"])
                    cfg = pb.ModelConfig(hdr["config"])
                    ops = []
                    if hasattr(mod.TritonPythonModel, "auto_complete_config"):
                        res = mod.TritonPythonModel.auto_complete_config(cfg)
                        if res is not None:
                            cfg = res
                        ops = cfg._ops
                    conn.send({"type": "autocomplete_done", "ops": ops})
                except Exception as e:
                    conn.send({"type": "autocomplete_done", "error": err_wire(e)})
            elif t == "init":
                try:
                    conn.decoupled = bool(hdr.get("decoupled"))
                    mod = load_model_module(hdr["model_file"])
                    model = mod.TritonPythonModel()
                    if hasattr(model, "initialize"):
                        model.initialize(hdr["args"])
                    conn.send({"type": "init_done"})
                except Exception as e:
                    conn.send({"type": "init_done", "error": {"message": _fmt_exc(e) + "\n" +
                                                              traceback.format_exc(),
                                                              "code": "INTERNAL"}})
            elif t == "execute":
                run_execute(model, hdr, fd)
                fd = None
            elif t == "finalize":
                try:
                    if model is not None and hasattr(model, "finalize"):
                        model.finalize()
                finally:
                    sys.stdout.flush()
                    conn.send({"type": "finalize_done"})
                    os._exit(0)
        finally:
            if fd is not None:
                os.close(fd)


main()
