#!/usr/bin/env python3
"""Census of Triton's own HTTP/gRPC client examples and L0 QA tests against cinfer.

    scripts/triton_qa.sh SERVER_GIT CLIENT_GIT [CINFER] [PYTHON] [--only SUITE,...]

SERVER_GIT / CLIENT_GIT: git directories (bare or not) of github.com/triton-inference-server/
server and /client. Everything of Triton's is taken from them into a scratch folder (nothing
is written into this repository). The models the tests need are built there from cinfer's
backends: Triton's docs/examples ONNX files and Python models (cinfer's Python backend runs
Triton's model.py files), the ONNX files Triton's own generators write (gen_qa_models.py,
gen_qa_identity_models.py), and, where Triton's QA uses a custom C++ backend, cinfer's test
backend seq_probe. Each server is the real binary, started fresh per suite (or per case where
Triton's test.sh does so), on 127.0.0.1:8000 (HTTP) and :8001 (gRPC) as the tests hard-code:
the wrapper runs this file in its own network namespace.

Prints one row per test (pass / fail / not-run with the reason) and the totals; writes the
same as JSON to $TRITON_QA_JSON when set.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HTTP = "127.0.0.1:8000"
PY = sys.executable

RESULTS = []  # (suite, test, status, reason)


def record(suite, test, status, reason=""):
    RESULTS.append((suite, test, status, reason))
    print(f"  {status:8s} {suite} :: {test}" + (f"  ({reason})" if reason else ""), flush=True)


# ---------------------------------------------------------------- scratch folder


class Scratch:
    def __init__(self, server_git, client_git, py):
        self.w = tempfile.mkdtemp(prefix="cinfer-triton-qa-")
        self.py = py
        self.server_git, self.client_git = server_git, client_git
        self._extract(server_git, ["qa/common", "qa/python_models", "docs/examples/model_repository"]
                      + [f"qa/{d}" for d in L0_DIRS], os.path.join(self.w, "server"))
        self._extract(client_git, ["src/python/examples"], os.path.join(self.w, "client"))
        self.qa = os.path.join(self.w, "server", "qa")
        self.examples = os.path.join(self.w, "client", "src", "python", "examples")
        self.docs_models = os.path.join(self.w, "server", "docs", "examples", "model_repository")
        # The tests hard-code localhost:8000/8001; localhost may resolve to ::1 first.
        for top in (self.qa, self.examples):
            for dp, _, fs in os.walk(top):
                for f in fs:
                    if f.endswith(".py"):
                        p = os.path.join(dp, f)
                        s = open(p, encoding="utf-8", errors="surrogateescape").read()
                        t = s.replace("localhost:800", "127.0.0.1:800")
                        if t != s:
                            open(p, "w", encoding="utf-8", errors="surrogateescape").write(t)
        # image_client.py imports the unmaintained attrdict (no longer imports on 3.10+).
        with open(os.path.join(self.examples, "attrdict.py"), "w") as f:
            f.write("class AttrDict(dict):\n"
                    "    def __init__(self, *a, **k):\n"
                    "        super().__init__(*a, **k)\n"
                    "        for key, v in self.items():\n"
                    "            self[key] = AttrDict(v) if isinstance(v, dict) else "
                    "[AttrDict(x) if isinstance(x, dict) else x for x in v] if isinstance(v, list) else v\n"
                    "    __getattr__ = dict.__getitem__\n")
        with open(os.path.join(self.w, "qa_run.py"), "w") as f:
            f.write(RUNNER)
        self._identity = None
        self._qa_models = None

    def _extract(self, git, paths, dest):
        os.makedirs(dest, exist_ok=True)
        have = [p for p in paths if subprocess.run(
            ["git", "--git-dir", git, "cat-file", "-e", f"HEAD:{p}"], capture_output=True).returncode == 0]
        arch = subprocess.run(["git", "--git-dir", git, "archive", "HEAD", *have],
                              check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=arch, check=True)

    def path(self, *p):
        return os.path.join(self.w, *p)

    def identity_models(self):
        """gen_qa_identity_models.py --onnx --ensemble, once."""
        if self._identity is None:
            d = self.path("qa_identity_model_repository")
            subprocess.run([self.py, "gen_qa_identity_models.py", "--onnx", "--ensemble",
                            "--models_dir", d], cwd=os.path.join(self.qa, "common"), check=True,
                           capture_output=True)
            self._identity = d
        return self._identity

    def qa_models(self):
        """gen_qa_models.py --onnx, once."""
        if self._qa_models is None:
            d = self.path("qa_model_repository")
            r = subprocess.run([self.py, "gen_qa_models.py", "--onnx", "--models_dir", d],
                               cwd=os.path.join(self.qa, "common"), capture_output=True, text=True)
            if r.returncode != 0:
                print(r.stderr[-2000:])
            self._qa_models = d
        return self._qa_models


RUNNER = r'''
import importlib, json, sys, unittest, traceback
out, modname, names = sys.argv[1], sys.argv[2], sys.argv[3:]
res = {}
try:
    mod = importlib.import_module(modname)
    loader = unittest.TestLoader()
    suite = loader.loadTestsFromNames(names, mod) if names else loader.loadTestsFromModule(mod)
except Exception:
    json.dump({"__import__": ["fail", traceback.format_exc()[-600:]]}, open(out, "w"))
    sys.exit(0)
def flat(s):
    for t in s:
        if isinstance(t, unittest.TestSuite):
            yield from flat(t)
        else:
            yield t
tests = list(flat(suite))
r = unittest.TextTestRunner(verbosity=2, stream=sys.stderr).run(unittest.TestSuite(tests))
for t in tests:
    res[t.id()] = ["pass", ""]
def last(msg):
    lines = [l for l in msg.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else ""
for t, m in r.failures + r.errors:
    res[t.id()] = ["fail", last(m)]
for t, m in r.skipped:
    res[t.id()] = ["not-run", "skipped by the test: " + m[:200]]
json.dump(res, open(out, "w"))
'''


# ---------------------------------------------------------------- the server


class Server:
    def __init__(self, bin, repo, args, log, cwd=None, env=None):
        self.log = log
        self.f = open(log, "w")
        cmd = [bin, "serve", "--model-repository", repo, "--host", "127.0.0.1",
               "--http-port", "8000", "--grpc-port", "8001", *args]
        self.f.write(" ".join(cmd) + "\n")
        self.f.flush()
        env = dict(env or os.environ)
        env["CINFER_PYTHON"] = PY  # the Python backend's interpreter: the one with numpy
        self.p = subprocess.Popen(cmd, stdout=self.f, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        deadline = time.monotonic() + 120
        while True:
            if self.p.poll() is not None:
                raise RuntimeError(f"server exited ({self.p.returncode}): see {log}")
            if time.monotonic() > deadline:
                self.p.kill()
                self.p.wait()
                self.f.close()
                raise RuntimeError("server did not come up in 120 s")
            try:
                req = urllib.request.Request(f"http://{HTTP}/v2/repository/index", data=b"{}",
                                             method="POST")
                idx = urllib.request.urlopen(req, timeout=5).read().decode()
                if "LOADING" not in idx:
                    break
            except urllib.error.HTTPError as e:
                if e.code == 403:  # --http-restricted-api model-repository: up, index refused
                    break
            except Exception:
                pass
            time.sleep(0.05)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.f.close()
        return self.p.returncode


# ---------------------------------------------------------------- running tests


def run_unittest(sc, suite, cwd, module, names, env_extra=None, timeout=900):
    """Runs module's tests (all, or the names) in one process; returns {id: [status, why]}."""
    out = tempfile.mktemp(dir=sc.w, suffix=".json")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([cwd, os.path.join(sc.qa, "common")])
    env.update(env_extra or {})
    log = open(os.path.join(sc.w, f"{suite}.client.log"), "a")
    try:
        subprocess.run([sc.py, os.path.join(sc.w, "qa_run.py"), out, module, *names], cwd=cwd,
                       env=env, stdout=log, stderr=log, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {n: ["fail", f"timed out after {timeout} s"] for n in (names or [module])}
    finally:
        log.close()
    if not os.path.exists(out):
        return {n: ["fail", "the test process died"] for n in (names or [module])}
    return json.load(open(out))


def list_tests(sc, cwd, module, cls):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([cwd, os.path.join(sc.qa, "common")])
    code = (f"import unittest, {module} as m; "
            f"print('\\n'.join(unittest.TestLoader().getTestCaseNames(m.{cls})))")
    r = subprocess.run([sc.py, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    return [x for x in r.stdout.split() if x]


def report(suite, res, prefix="", notes=None):
    notes = notes or {}
    for tid, (st, why) in sorted(res.items()):
        short = tid.split(".", 1)[1] if "." in tid else tid
        if st == "fail" and short in notes:
            why = notes[short] + " | " + why
        record(suite, prefix + short, st, why)


def with_server(sc, bin, suite, repo, args, fn, cwd=None, env=None):
    try:
        log = os.path.join(sc.w, suite.replace("/", "_").replace(" ", "_") + ".server.log")
        srv = Server(bin, repo, args, log, cwd=cwd, env=env)
    except RuntimeError as e:
        record(suite, "(server start)", "fail", str(e))
        return False, str(e)
    try:
        fn()
    finally:
        rc = srv.stop()
    text = open(srv.log, errors="replace").read()
    if "AddressSanitizer" in text or "runtime error:" in text:
        record(suite, "(server log)", "fail", "sanitizer report in " + srv.log)
    return True, rc


def copy_model(src, dst_repo, name=None, subst=None):
    d = os.path.join(dst_repo, name or os.path.basename(src))
    shutil.copytree(src, d, dirs_exist_ok=True)
    if subst:
        p = os.path.join(d, "config.pbtxt")
        s = open(p).read()
        for a, b in subst:
            s = s.replace(a, b)
        open(p, "w").write(s)
    return d


# ---------------------------------------------------------------- suites

L0_DIRS = ["L0_http", "L0_shared_memory", "L0_logging", "L0_trace", "L0_lifecycle",
           "L0_infer_zero", "L0_simple_ensemble", "L0_parameters", "L0_string_io",
           "L0_sequence_batcher", "L0_model_config", "L0_decoupled", "L0_implicit_state"]


def examples_repo(sc):
    r = sc.path("repo_examples")
    os.makedirs(r, exist_ok=True)
    for m in ("simple", "simple_string", "simple_sequence", "simple_dyna_sequence",
              "simple_identity", "simple_int8"):
        copy_model(os.path.join(sc.docs_models, m), r)
    # Triton's L0_http makes simple_string_dyna_sequence from simple_dyna_sequence with a
    # STRING CORRID on its C++ dyna_sequence test backend; cinfer's is seq_probe.
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
    import seq_models
    _, cfg = seq_models.probe_sequence()
    os.makedirs(os.path.join(r, "simple_string_dyna_sequence", "1"), exist_ok=True)
    open(os.path.join(r, "simple_string_dyna_sequence", "config.pbtxt"), "w").write(cfg)
    return r


def densenet(repo):
    """cinfer's densenet_expression ONNX file, configured as Triton's densenet_onnx is for
    image_client.py (FORMAT_NCHW, no batching, a label file)."""
    d = os.path.join(repo, "densenet_expression")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    src = os.path.join(ROOT, "examples", "model_repository", "densenet_expression", "1", "model.onnx")
    os.symlink(os.path.realpath(src), os.path.join(d, "1", "model.onnx"))
    open(os.path.join(d, "labels.txt"), "w").write(
        "neutral\nhappiness\nsurprise\nsadness\nanger\ndisgust\nfear\n")
    open(os.path.join(d, "config.pbtxt"), "w").write("""name: "densenet_expression"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "input" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ]
          reshape { shape: [ 1, 3, 224, 224 ] } } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 7 ] reshape { shape: [ 1, 7 ] }
           label_filename: "labels.txt" } ]
""")


def suite_examples(sc, bin, only):
    suite = "client-examples"
    r = examples_repo(sc)
    mcrepo = sc.path("repo_examples_mc")  # simple_http_model_control.py counts 7 models
    shutil.copytree(r, mcrepo, symlinks=True)
    densenet(r)
    img = os.path.realpath(os.path.join(ROOT, "examples", "model_repository", "densenet_expression",
                                        "1", "model.onnx"))
    while img != "/" and not os.path.exists(os.path.join(img, "astronaut.png")):
        img = os.path.dirname(img)
    img = os.path.join(img, "astronaut.png")
    probe = os.path.join(bin_build(bin), "tests", "backends")
    if not os.path.isdir(probe):
        probe = os.path.join(ROOT, "build", "tests", "backends")
    cases = [
        ("simple_http_health_metadata.py", ["-v"]),
        ("simple_http_infer_client.py", []),
        ("simple_http_async_infer_client.py", []),
        ("simple_http_aio_infer_client.py", []),
        ("simple_http_string_infer_client.py", []),
        ("simple_http_shm_client.py", []),
        ("simple_http_shm_string_client.py", []),
        ("reuse_infer_objects_client.py", []),
        ("simple_http_sequence_sync_infer_client.py", []),
        ("simple_http_sequence_sync_infer_client.py", ["-d"]),
        ("image_client.py", ["-m", "densenet_expression", "-s", "INCEPTION", "-c", "3", img]),
        ("image_client.py", ["-m", "densenet_expression", "-s", "INCEPTION", "-a", "-c", "1", img]),
    ]
    # the gRPC twins (the helper "grpc" owns their fixes; listed here for the totals)
    grpc_cases = [(c.replace("_http_", "_grpc_"), a) for c, a in cases if "_http_" in c]
    grpc_cases += [("image_client.py", ["-i", "gRPC", "-u", "127.0.0.1:8001", "-m", "densenet_expression",
                                        "-s", "INCEPTION", "-c", "3", img])]

    def go():
        for script, args in cases + grpc_cases:
            name = " ".join([script] + [a if a != img else "astronaut.png" for a in args])
            p = os.path.join(sc.examples, script)
            if not os.path.exists(p):
                continue
            try:
                res = subprocess.run([sc.py, p, *args], cwd=sc.examples, capture_output=True,
                                     text=True, timeout=300)
                out = (res.stdout + res.stderr).strip().splitlines()
                why = "" if res.returncode == 0 else (out[-1][:300] if out else f"exit {res.returncode}")
                record(suite, name, "pass" if res.returncode == 0 else "fail", why)
            except subprocess.TimeoutExpired:
                record(suite, name, "fail", "timed out")
    ok, why = with_server(sc, bin, suite, r, ["--backend-directory", probe], go)
    if not ok:
        record(suite, "(server)", "fail", why)
    record(suite, "simple_http_cudashm_client.py", "not-run", "needs a GPU and cuda-python")
    record(suite, "simple_grpc_cudashm_client.py", "not-run", "needs a GPU and cuda-python")

    # simple_http_model_control.py: explicit mode (L0_http test.sh)
    # simple_grpc_model_control.py counts 8 (the repository of Triton's L0_grpc CI has one more
    # model than L0_http's, not named in its repository): an extra copy of simple_int8
    mcrepo8 = sc.path("repo_examples_mc8")
    shutil.copytree(mcrepo, mcrepo8, symlinks=True)
    copy_model(os.path.join(mcrepo, "simple_int8"), mcrepo8, "simple_int8_copy",
               [('name: "simple_int8"', 'name: "simple_int8_copy"')])

    def mc(scripts):
        for script in scripts:
            p = os.path.join(sc.examples, script)
            if os.path.exists(p):
                res = subprocess.run([sc.py, p, "-v"], cwd=sc.examples, capture_output=True,
                                     text=True, timeout=300)
                out = (res.stdout + res.stderr).strip().splitlines()
                record(suite, script, "pass" if res.returncode == 0 else "fail",
                       "" if res.returncode == 0 else (out[-1][:300] if out else ""))
    with_server(sc, bin, suite + "-mc", mcrepo, ["--model-control-mode", "explicit",
                                                 "--backend-directory", probe],
                lambda: mc(["simple_http_model_control.py"]))
    with_server(sc, bin, suite + "-mc", mcrepo8, ["--model-control-mode", "explicit",
                                                  "--backend-directory", probe],
                lambda: mc(["simple_grpc_model_control.py"]))


def bin_build(bin):
    # build/src/cli/cinfer -> build
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(bin))))


def suite_l0_http(sc, bin, only):
    suite = "L0_http/http_test.py"
    ident = sc.identity_models()
    r = sc.path("repo_http")
    os.makedirs(r, exist_ok=True)
    for m in ("onnx_zero_1_float32", "onnx_zero_1_object", "onnx_zero_1_float16", "onnx_zero_3_float32"):
        copy_model(os.path.join(ident, m), r)
    d = copy_model(os.path.join(ident, "onnx_zero_1_object"), r, "onnx_zero_1_object_1_element",
                   [("onnx_zero_1_object", "onnx_zero_1_object_1_element")])
    p = os.path.join(d, "config.pbtxt")
    s = open(p).read()
    open(p, "w").write(s.replace("-1", "1", 1))
    d = copy_model(os.path.join(ident, "onnx_zero_1_float32"), r, "onnx_zero_1_float32_queue",
                   [("onnx_zero_1_float32", "onnx_zero_1_float32_queue")])
    with open(os.path.join(d, "config.pbtxt"), "a") as f:
        f.write("dynamic_batching {\n max_queue_delay_microseconds: 1000000\n preferred_batch_size: [ 8 ]\n"
                " default_queue_policy {\n max_queue_size: 1\n }\n}\n")
    copy_model(os.path.join(sc.docs_models, "simple_identity"), r)
    copy_model(os.path.join(sc.docs_models, "simple_identity"), r, "simple_identity_int64",
               [("TYPE_STRING", "TYPE_INT64"), ("simple_identity", "simple_identity_int64")])
    cwd = os.path.join(sc.qa, "L0_http")
    with_server(sc, bin, "L0_http", r, ["--model-control-mode", "explicit", "--load-model", "*"],
                lambda: report(suite, run_unittest(sc, "L0_http", cwd, "http_test", [])))

    # generate_endpoint_test.py with Triton's mock_llm (a decoupled Python model)
    suite = "L0_http/generate_endpoint_test.py"
    gm = os.path.join(sc.qa, "python_models", "generate_models")
    with_server(sc, bin, "L0_http-generate", gm, ["--log-verbose", "1"],
                lambda: report(suite, run_unittest(sc, "L0_http", cwd, "generate_endpoint_test", [])))

    # http_input_size_limit_test.py: one server per case, as test.sh
    suite = "L0_http/http_input_size_limit_test.py"
    r2 = sc.path("repo_http_limit")
    os.makedirs(r2, exist_ok=True)
    copy_model(os.path.join(ident, "onnx_zero_1_float32"), r2)
    copy_model(os.path.join(sc.docs_models, "simple_identity"), r2)
    plan = [([], ["test_default_limit_raw_binary", "test_default_limit_json", "test_large_string_in_json",
                  "test_default_limit_compressed", "test_json_dtype_size_expansion_exceeds_limit_error"]),
            (["--http-max-input-size", str(2 ** 27)], ["test_large_input_raw_binary", "test_large_input_json",
                                                      "test_large_input_compressed"])]
    for args, tests in plan:
        for t in tests:
            with_server(sc, bin, "L0_http-limit", r2, args, lambda t=t: report(
                suite, run_unittest(sc, "L0_http", cwd, "http_input_size_limit_test",
                                    [f"InferSizeLimitTest.{t}"])))

    # http_restricted_api_test.py (test.sh's flags)
    suite = "L0_http/http_restricted_api_test.py"
    r3 = sc.path("repo_http_restricted")
    os.makedirs(r3, exist_ok=True)
    copy_model(os.path.join(sc.docs_models, "simple"), r3)
    args = ["--http-restricted-api", "model-repository:admin-key=admin-value",
            "--http-restricted-api", "inference,metadata:infer-key=infer-value"]
    with_server(sc, bin, "L0_http-restricted", r3, args, lambda: report(
        suite, run_unittest(sc, "L0_http", cwd, "http_restricted_api_test", ["RestrictedAPITest"])))


def suite_shm(sc, bin, only):
    cwd = os.path.join(sc.qa, "L0_shared_memory")
    r = sc.path("repo_shm")
    os.makedirs(r, exist_ok=True)
    copy_model(os.path.join(sc.docs_models, "simple"), r)
    # test_large_shm_register_offset: python and onnx add/sub INT32 models (test.sh)
    d = copy_model(os.path.join(sc.qa, "python_models", "add_sub"), r, "python_int32_int32_int32")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    shutil.move(os.path.join(d, "model.py"), os.path.join(d, "1", "model.py"))
    p = os.path.join(d, "config.pbtxt")
    s = open(p).read().replace("TYPE_FP32", "TYPE_INT32").replace('name: "add_sub"', 'name: "python_int32_int32_int32"')
    open(p, "w").write(s + "\nmax_batch_size: 8\n")
    qm = sc.qa_models()
    if os.path.isdir(os.path.join(qm, "onnx_int32_int32_int32")):
        d = copy_model(os.path.join(qm, "onnx_int32_int32_int32"), r)
        for v in os.listdir(d):
            if v.isdigit() and v != "1":
                shutil.rmtree(os.path.join(d, v))  # test.sh copies version 1 only
    tests = list_tests(sc, cwd, "shared_memory_test", "SharedMemoryTest")
    for proto in ("http", "grpc"):
        suite = f"L0_shared_memory ({proto})"
        for t in tests:
            if t == "test_client_shm_disabled_by_default":
                record(suite, t, "not-run", "Triton's --allow-client-shm=false default; cinfer serves "
                       "shared memory by default (--http-restricted-api shared-memory:K=V limits it)")
                continue
            with_server(sc, bin, "L0_shared_memory", r, ["--log-verbose", "1"], lambda t=t: report(
                suite, run_unittest(sc, "L0_shared_memory", cwd, "shared_memory_test",
                                    [f"SharedMemoryTest.{t}"],
                                    {"CLIENT_TYPE": proto, "BACKENDS": "python onnx"})))
    # TestSharedMemoryUnregister: simple = Triton's execute_delayed_model (Python)
    r2 = sc.path("repo_shm_delayed")
    d = copy_model(os.path.join(sc.qa, "python_models", "execute_delayed_model"), r2, "simple")
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    shutil.move(os.path.join(d, "model.py"), os.path.join(d, "1", "model.py"))
    for t in list_tests(sc, cwd, "shared_memory_test", "TestSharedMemoryUnregister"):
        proto = "grpc" if t.endswith("_grpc") else "http"
        with_server(sc, bin, "L0_shared_memory", r2, ["--log-verbose", "1"], lambda t=t: report(
            f"L0_shared_memory ({proto})", run_unittest(
                sc, "L0_shared_memory", cwd, "shared_memory_test", [f"TestSharedMemoryUnregister.{t}"],
                {"CLIENT_TYPE": proto})))


def simple_identity_fp32_repo(sc, name):
    r = sc.path(name)
    os.makedirs(r, exist_ok=True)
    d = copy_model(os.path.join(sc.qa, "python_models", "identity_fp32"), r, "simple",
                   [('name: "identity_fp32"', 'name: "simple"')])
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    shutil.move(os.path.join(d, "model.py"), os.path.join(d, "1", "model.py"))
    return r


def suite_logging_trace(sc, bin, only):
    cwd = os.path.join(sc.qa, "L0_logging")
    r = simple_identity_fp32_repo(sc, "repo_logging")
    with_server(sc, bin, "L0_logging", r, [], lambda: report(
        "L0_logging/logging_endpoint_test.py",
        run_unittest(sc, "L0_logging", cwd, "logging_endpoint_test", [])))
    cwd = os.path.join(sc.qa, "L0_trace")
    args = ["--trace-config", "triton,file=global_unittest.log", "--trace-config", "level=TIMESTAMPS",
            "--trace-config", "rate=1"]
    with_server(sc, bin, "L0_trace", r, args, lambda: report(
        "L0_trace/trace_endpoint_test.py",
        run_unittest(sc, "L0_trace", cwd, "trace_endpoint_test", ["TraceEndpointTest"])), cwd=cwd)


def suite_ensembles(sc, bin, only):
    ident = sc.identity_models()
    for d in os.listdir(ident):
        if d.startswith("nop_"):
            os.makedirs(os.path.join(ident, d, "1"), exist_ok=True)
    cwd = os.path.join(sc.qa, "L0_infer_zero")
    for backends in ("onnx",):
        with_server(sc, bin, "L0_infer_zero", ident, ["--strict-readiness", "false"], lambda: report(
            "L0_infer_zero/infer_zero_test.py (BACKENDS=onnx, HTTP+gRPC)",
            run_unittest(sc, "L0_infer_zero", cwd, "infer_zero_test", [], {"BACKENDS": backends})))
    S = os.path.join(sc.qa, "L0_simple_ensemble", "models")
    for m in ("partial_add_sub", "ensemble_partial_add_sub"):
        pass  # Python-backend models: cinfer runs them now
    for v in ("1", "2"):
        os.makedirs(os.path.join(S, "simple", v), exist_ok=True)
        shutil.copy(os.path.join(sc.docs_models, "simple", "1", "model.onnx"), os.path.join(S, "simple", v))
    os.makedirs(os.path.join(S, "ensemble_add_sub_int32_int32_int32", "1"), exist_ok=True)
    p = os.path.join(S, "simple", "config.pbtxt")
    if not os.path.exists(p):
        shutil.copy(os.path.join(sc.docs_models, "simple", "config.pbtxt"), p)
    os.makedirs(os.path.join(S, "ensemble_partial_add_sub", "1"), exist_ok=True)
    cwd = os.path.join(sc.qa, "L0_simple_ensemble")
    log = os.path.join(sc.w, "L0_simple_ensemble.server.log")
    for t in ("test_ensemble_add_sub", "test_ensemble_sequence_flags", "test_ensemble_add_sub_one_output",
              "test_ensemble_partial_add_sub"):
        args = ["--log-verbose", "1"] if t == "test_ensemble_partial_add_sub" else []
        with_server(sc, bin, "L0_simple_ensemble", S, args, lambda t=t: report(
            "L0_simple_ensemble/ensemble_test.py",
            run_unittest(sc, "L0_simple_ensemble", cwd, "ensemble_test", [f"EnsembleTest.{t}"],
                         {"SERVER_LOG": log})))
    record("L0_simple_ensemble/ensemble_backpressure_test.py", "(all)", "not-run",
           "not wired into this census yet (Python producer/consumer models with max_inflight_requests)")


def suite_parameters(sc, bin, only):
    cwd = os.path.join(sc.qa, "L0_parameters")
    r = os.path.join(cwd, "model_repository")
    for m in ("identity", "ensemble"):
        os.makedirs(os.path.join(r, m, "1"), exist_ok=True)
    plan = [("test_params", []),
            ("test_params_reserved_rejected", []),
            ("test_headers", ["--grpc-header-forward-pattern", "MY_HEADER.*",
                              "--http-header-forward-pattern", "MY_HEADER.*"]),
            ("test_grpc_header_forward_pattern_case_sensitive", ["--grpc-header-forward-pattern", "(?-i)MY_HEADER.*"]),
            ("test_headers_reserved_rejected", ["--grpc-header-forward-pattern", ".*",
                                                "--http-header-forward-pattern", ".*"])]
    for t, args in plan:
        with_server(sc, bin, f"L0_parameters/parameters_test.py {t}", r,
                    ["--exit-timeout-secs", "120", *args], lambda t=t: report(
                        "L0_parameters/parameters_test.py",
                        run_unittest(sc, "L0_parameters", cwd, "parameters_test",
                                     [f"InferenceParametersTest.{t}"])))


def suite_string_io(sc, bin, only):
    cwd = os.path.join(sc.qa, "L0_string_io")
    ident = sc.identity_models()
    r = sc.path("repo_string_io")
    os.makedirs(r, exist_ok=True)
    copy_model(os.path.join(ident, "onnx_zero_1_object"), r)
    si = os.path.join(sc.qa, "python_models", "string_identity")
    if os.path.isdir(si):
        d = copy_model(si, r, subst=[("[ 1 ]", "[ 8 ]")])  # test.sh's sed
        os.makedirs(os.path.join(d, "1"), exist_ok=True)
        if os.path.exists(os.path.join(d, "model.py")):
            shutil.move(os.path.join(d, "model.py"), os.path.join(d, "1", "model.py"))
    with_server(sc, bin, "L0_string_io", r, [], lambda: report(
        "L0_string_io/string_client_test.py",
        run_unittest(sc, "L0_string_io", cwd, "string_client_test", [])))


def suite_lifecycle(sc, bin, only):
    cwd = os.path.join(sc.qa, "L0_lifecycle")
    suite = "L0_lifecycle/lifecycle_test.py"
    qm = sc.qa_models()
    src = os.path.join(qm, "onnx_float32_float32_float32")
    r = os.path.join(cwd, "models")  # the test reads models/<model>/3/model.onnx
    os.makedirs(r, exist_ok=True)
    if os.path.isdir(src):
        d = copy_model(src, r)
        # test.sh: "only version 2, 3 is valid version directory while config requests 1, 3"
        # (the generated config has the version_policy)
        shutil.rmtree(os.path.join(d, "1"), ignore_errors=True)
    # test.sh for test_config_override: its own repository where only version 2 has files
    # (1 and 3 are empty folders, so the config's version policy fails the plain load) and
    # no model loaded at start
    rc = sc.path("repo_config_override")
    os.makedirs(rc, exist_ok=True)
    if os.path.isdir(src):
        d = copy_model(src, rc)
        for v in ("1", "3"):
            vd = os.path.join(d, v)
            shutil.rmtree(vd, ignore_errors=True)
            os.makedirs(vd)
    for t, args, repo in [
            ("test_file_override", ["--model-control-mode", "explicit", "--load-model",
                                    "onnx_float32_float32_float32"], r),
            ("test_file_override_security", ["--model-control-mode", "explicit"], sc.path("repo_empty")),
            ("test_config_override", ["--model-control-mode", "explicit"], rc)]:
        os.makedirs(repo, exist_ok=True)
        with_server(sc, bin, "L0_lifecycle", repo, args, cwd=cwd, fn=lambda t=t: report(
            suite, run_unittest(sc, "L0_lifecycle", cwd, "lifecycle_test", [f"LifeCycleTest.{t}"])))
    record(suite, "(the other cases)", "not-run",
           "each needs its own repository built by test.sh from TensorRT/TF/libtorch models, or a "
           "GPU; read for behaviour, not run")


def _np_dtype(t):
    import numpy as np
    return {"TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16,
            "TYPE_UINT32": np.uint32, "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8,
            "TYPE_INT16": np.int16, "TYPE_INT32": np.int32, "TYPE_INT64": np.int64,
            "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
            "TYPE_STRING": np.object_}.get(t)


def _random_input(dt, shape, rng):
    import numpy as np
    npt = _np_dtype(dt)
    if npt is np.object_:  # Triton's string models Cast the strings to numbers
        return np.array([str(int(x)).encode() for x in rng.integers(0, 50, int(np.prod(shape)))],
                        dtype=np.object_).reshape(shape)
    if npt is np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(npt, np.floating):
        return rng.uniform(-4, 4, shape).astype(npt)
    lo, hi = (0, 50) if np.issubdtype(npt, np.unsignedinteger) else (-25, 25)
    return rng.integers(lo, hi, shape).astype(npt)


def _bf16_as_fp32(path):
    """The model's bytes with every BF16 tensor type made FLOAT: onnxruntime's reference for
    a BF16 model (its results are then rounded to BF16 to compare)."""
    import onnx
    from onnx import TensorProto as TP
    m = onnx.load(path)
    for v in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        if v.type.tensor_type.elem_type == TP.BFLOAT16:
            v.type.tensor_type.elem_type = TP.FLOAT
    for n in m.graph.node:
        for a in n.attribute:
            if a.name == "to" and a.i == TP.BFLOAT16:
                a.i = TP.FLOAT
    return m.SerializeToString()


def check_onnx_repo(sc, bin, suite, repo):
    """Serves every ONNX model of repo, and checks each one's answer to random inputs against
    onnxruntime on the same file (issue 19 item 8)."""
    import numpy as np
    import onnxruntime as ort
    import tritonclient.http as httpclient
    from tritonclient.utils import np_to_triton_dtype
    rng = np.random.default_rng(19)

    def go():
        c = httpclient.InferenceServerClient(HTTP, network_timeout=300)
        for e in sorted(c.get_model_repository_index(), key=lambda e: e["name"]):
            name = e["name"]
            d = os.path.join(repo, name)
            if not any(os.path.exists(os.path.join(d, v, "model.onnx")) for v in os.listdir(d)
                       if v.isdigit()):
                continue  # ensembles, nop (identity backend) models
            if e.get("state") != "READY":
                record(suite, name, "fail", "load: " + e.get("reason", e.get("state", ""))[:300])
                continue
            try:
                cfg = c.get_model_config(name)
                ver = e.get("version") or c.get_model_metadata(name)["versions"][-1]
                path = os.path.join(repo, name, str(ver), "model.onnx")
                if cfg.get("platform") != "onnxruntime_onnx" and cfg.get("backend") != "onnxruntime":
                    continue
                mb = cfg.get("max_batch_size", 0)
                feeds, ins = {}, []
                for i in cfg.get("input", []):
                    dims = [1 if d < 0 else d for d in i.get("dims", [])]
                    shape = ([2] if mb else []) + dims
                    bf16 = i["data_type"] == "TYPE_BF16"
                    x = _random_input("TYPE_FP32" if bf16 else i["data_type"], shape, rng)
                    if bf16:  # exact in bfloat16 both ways
                        import ml_dtypes
                        x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
                    feeds[i["name"]] = x.astype(ml_dtypes.bfloat16) if bf16 else x
                    t = httpclient.InferInput(i["name"], list(x.shape), "BF16" if bf16 else
                                              np_to_triton_dtype(x.dtype) if x.dtype != np.object_ else "BYTES")
                    t.set_data_from_numpy(x)
                    ins.append(t)
                outs = [o["name"] for o in cfg.get("output", [])]
                r = c.infer(name, ins, model_version=str(ver),
                            outputs=[httpclient.InferRequestedOutput(o) for o in outs])
                try:
                    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                    if any("bfloat16" in x.type for x in sess.get_inputs()):
                        raise RuntimeError("bf16")
                except Exception:  # noqa: BLE001 - onnxruntime has no BF16 Add/Sub kernels
                    sess = ort.InferenceSession(_bf16_as_fp32(path), providers=["CPUExecutionProvider"])
                    feeds = {k: (v.astype(np.float32) if v.dtype.name == "bfloat16" else v)
                             for k, v in feeds.items()}
                onames = [o.name for o in sess.get_outputs()]
                ofeeds = {k: (v.astype(str) if v.dtype == np.object_ else v) for k, v in feeds.items()
                          if k in {x.name for x in sess.get_inputs()}}
                want = dict(zip(onames, sess.run(onames, ofeeds)))
                bad = []
                for o in outs:
                    got, exp = r.as_numpy(o), want.get(o)
                    if exp is None:
                        continue
                    if exp.dtype.name == "bfloat16" or r.get_output(o)["datatype"] == "BF16":
                        import ml_dtypes
                        exp = exp.astype(ml_dtypes.bfloat16).astype(np.float32)
                        got = got.astype(np.float32)
                    if got.dtype == np.object_ or exp.dtype.kind in "OU":
                        ok = [g.decode() if isinstance(g, bytes) else str(g) for g in got.ravel()] == \
                             [str(v) for v in exp.ravel()]
                    elif np.issubdtype(exp.dtype, np.floating):
                        ok = got.shape == exp.shape and np.allclose(got, exp, rtol=2e-3, atol=2e-3, equal_nan=True)
                    else:
                        ok = got.shape == exp.shape and np.array_equal(got, exp)
                    if not ok:
                        bad.append(o)
                record(suite, f"{name} v{ver}", "fail" if bad else "pass",
                       f"outputs {bad} differ from onnxruntime" if bad else "")
            except Exception as ex:  # noqa: BLE001 - one model's failure is one row
                record(suite, name, "fail", str(ex).splitlines()[0][:300] if str(ex) else type(ex).__name__)
        c.close()
    with_server(sc, bin, suite, repo, ["--strict-readiness", "false"], go)


def suite_onnx_models(sc, bin, only):
    check_onnx_repo(sc, bin, "gen_qa_models.py --onnx", sc.qa_models())
    ident = sc.identity_models()
    check_onnx_repo(sc, bin, "gen_qa_identity_models.py --onnx", ident)


SUITES = {
    "examples": suite_examples,
    "http": suite_l0_http,
    "shm": suite_shm,
    "logtrace": suite_logging_trace,
    "ensembles": suite_ensembles,
    "parameters": suite_parameters,
    "string_io": suite_string_io,
    "lifecycle": suite_lifecycle,
    "onnx_models": suite_onnx_models,
}

NOT_RUN = [
    ("L0_sequence_batcher/sequence_batcher_test.py", "its models come from gen_qa_sequence_models.py "
     "(TensorRT/TF/libtorch/ONNX with batch-size variants) and Triton's C++ sequence backends, built by "
     "test.sh per backend; cinfer's own test_sequence.py covers the behaviour; the client example "
     "simple_http_sequence_sync_infer_client.py runs above"),
    ("L0_model_config", "compares Triton's auto-completed configs (compare_status.py) for TF/TensorRT/"
     "libtorch files; not a client test"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server_git")
    ap.add_argument("client_git")
    ap.add_argument("cinfer")
    ap.add_argument("python")
    ap.add_argument("--only", default="")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    global PY
    PY = a.python
    sc = Scratch(a.server_git, a.client_git, a.python)
    print("scratch:", sc.w, flush=True)
    only = [x for x in a.only.split(",") if x]
    try:
        for name, fn in SUITES.items():
            if only and name not in only:
                continue
            print(f"== {name}", flush=True)
            try:
                fn(sc, a.cinfer, only)
            except Exception as e:  # a broken suite is a failure row, the census goes on
                import traceback
                traceback.print_exc()
                record(name, "(suite)", "fail", f"driver error: {e}")
        if not only:
            for s, why in NOT_RUN:
                record(s, "(all)", "not-run", why)
    finally:
        if not a.keep:
            shutil.rmtree(sc.w, ignore_errors=True)
    print()
    print("| suite | test | result | reason |")
    print("|---|---|---|---|")
    for s, t, st, why in RESULTS:
        print(f"| {s} | {t} | {st} | {why.replace('|', '/')} |")
    tot = {k: sum(1 for r in RESULTS if r[2] == k) for k in ("pass", "fail", "not-run")}
    print()
    print("| suite | pass | fail | not-run |")
    print("|---|---|---|---|")
    for s in dict.fromkeys(r[0] for r in RESULTS):
        n = {k: sum(1 for r in RESULTS if r[0] == s and r[2] == k) for k in ("pass", "fail", "not-run")}
        print(f"| {s} | {n['pass']} | {n['fail']} | {n['not-run']} |")
    print()
    print(f"TOTAL pass {tot['pass']} fail {tot['fail']} not-run {tot['not-run']}")
    if os.environ.get("TRITON_QA_JSON"):
        json.dump({"results": RESULTS, "totals": tot}, open(os.environ["TRITON_QA_JSON"], "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
