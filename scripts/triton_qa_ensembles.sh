#!/bin/bash
# Runs Triton's own ensemble tests against cinfer, over HTTP only (written before cinfer had
# gRPC; scripts/triton_qa.sh --only ensembles runs them in both protocols as part of the
# census):
#   - qa/common/gen_qa_identity_models.py --onnx --ensemble, then
#     qa/L0_infer_zero/infer_zero_test.py with BACKENDS=none (the ensembles only) and
#     BACKENDS=onnx (the ONNX identity models too);
#   - qa/L0_simple_ensemble/ensemble_test.py test_ensemble_add_sub and
#     test_ensemble_add_sub_one_output, with an add/sub ONNX model made here for "simple".
# Nothing of Triton's is copied into this repository: give it a checkout (or an extracted
# archive) of github.com/triton-inference-server/server. Everything is generated under a
# temporary folder. Each server runs in its own network namespace (unshare -n, root), as
# Triton's tests use the fixed port 8000.
#
#   scripts/triton_qa_ensembles.sh TRITON_SERVER_CHECKOUT [CINFER_BIN] [PYTHON]
set -euo pipefail
TRITON=$(realpath "$1")
BIN=$(realpath "${2:-build/src/cli/cinfer}")
PY=${3:-build/venv/bin/python}
[ -x "$PY" ] || PY=python3
W=$(mktemp -d /tmp/cinfer-triton-qa-XXXXXX)
trap 'rm -rf "$W"' EXIT
cp -r "$TRITON/qa/common" "$TRITON/qa/L0_infer_zero" "$TRITON/qa/L0_simple_ensemble" "$W/"
mkdir -p "$W/qa" && mv "$W/common" "$W/L0_infer_zero" "$W/L0_simple_ensemble" "$W/qa/"

# The repositories.
(cd "$W/qa/common" && "$PY" gen_qa_identity_models.py --onnx --ensemble --models_dir "$W/zero")
for d in "$W"/zero/nop_*; do mkdir -p "$d/1"; done # test.sh's create_nop_version_dir
S="$W/qa/L0_simple_ensemble/models"
rm -rf "$S/partial_add_sub" "$S/ensemble_partial_add_sub" # python backend models
mkdir -p "$S/ensemble_add_sub_int32_int32_int32/1" "$S/simple/1" "$S/simple/2"
"$PY" - "$S" <<'EOF'
import sys, onnx
from onnx import helper, TensorProto as T
for v in (1, 2):
    io = lambda n: helper.make_tensor_value_info(n, T.INT32, ["b", 16])
    g = helper.make_graph([helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                           helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], "simple",
                          [io("INPUT0"), io("INPUT1")], [io("OUTPUT0"), io("OUTPUT1")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, f"{sys.argv[1]}/simple/{v}/model.onnx")
EOF

# HTTP-only runners: the tests' helpers default to HTTP and gRPC.
cat > "$W/qa/L0_infer_zero/run_http.py" <<'EOF'
import sys, unittest
sys.path.insert(0, "../common")
import infer_util as iu
_orig = iu.infer_zero
def http_only(*a, **k):
    if a[1] in ("none", "none_nobatch"):
        return None  # BACKENDS=none: only the ensembles
    k["use_grpc"] = False
    k["use_streaming"] = False
    return _orig(*a, **k)
iu.infer_zero = http_only
import infer_zero_test
infer_zero_test.VALIDATION_FNS["none"] = lambda *a: True
unittest.main(module=infer_zero_test, verbosity=1, exit=True)
EOF
cat > "$W/qa/L0_simple_ensemble/run_http.py" <<'EOF'
import sys, unittest
sys.path.insert(0, "../common")
import infer_util as iu
_orig = iu.infer_exact
def http_only(*a, **k):
    k["use_grpc"] = False
    k["use_streaming"] = False
    return _orig(*a, **k)
iu.infer_exact = http_only
import ensemble_test
unittest.main(module=ensemble_test, verbosity=1, exit=True)
EOF
cat > "$W/in_netns.sh" <<'EOF'
#!/bin/bash
# in_netns.sh BIN REPO DIR CMD...: serve REPO on 127.0.0.1:8000, run CMD in DIR, stop.
ip link set lo up
BIN=$1; REPO=$2; DIR=$3; shift 3
"$BIN" serve --model-repository "$REPO" --host 127.0.0.1 --http-port 8000 > "$REPO.log" 2>&1 &
PID=$!
ok=0
for i in $(seq 1 600); do
  # Not /v2/health/ready: readiness is strict (Triton's default), and the repository of
  # L0_infer_zero has models cinfer cannot load (ONNX string tensors).
  idx=$(curl -sf -X POST localhost:8000/v2/repository/index 2>/dev/null || true)
  if [ -n "$idx" ] && ! grep -q LOADING <<< "$idx"; then ok=1; break; fi
  sleep 0.1
done
[ $ok = 1 ] || { echo "server did not start"; cat "$REPO.log"; kill $PID; exit 1; }
rc=0
(cd "$DIR" && "$@") || rc=$?
kill -TERM $PID; wait $PID || rc=1
! grep -q -i "sanitizer\|runtime error" "$REPO.log" || { echo "sanitizer report"; rc=1; }
exit $rc
EOF
chmod +x "$W/in_netns.sh"

fail=0
run() { echo "== $*"; unshare -n "$W/in_netns.sh" "$BIN" "$@" || fail=1; }
BACKENDS=none run "$W/zero" "$W/qa/L0_infer_zero" "$PY" run_http.py
echo "== BACKENDS=onnx (its 8 oo* tests fail on the ONNX models with string tensors)"
BACKENDS=onnx unshare -n "$W/in_netns.sh" "$BIN" "$W/zero" "$W/qa/L0_infer_zero" "$PY" run_http.py || true
run "$S" "$W/qa/L0_simple_ensemble" "$PY" run_http.py EnsembleTest.test_ensemble_add_sub
run "$S" "$W/qa/L0_simple_ensemble" "$PY" run_http.py EnsembleTest.test_ensemble_add_sub_one_output
exit $fail
