#!/usr/bin/env bash
# callgrind_identity.sh: user-space instructions per identity request (16 FP32 values,
# JSON in and out), counted by callgrind. Deterministic and unaffected by machine load, so
# it measures hot-path work where wall-clock benchmarks on a shared machine cannot.
# Usage: bench/http/callgrind_identity.sh [BIN] [OUT_PREFIX]   (needs valgrind, wrk)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/src/cli/cinfer}; OUT=${2:-/tmp/cinfer-cg}; P=$((24000 + RANDOM % 5000))
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
body='{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":[0.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5,11.5,12.5,13.5,14.5,15.5]}]}'
printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\n' "'$body'" > "$work/post.lua"
rm -f "$OUT".*
# OMP_WAIT_POLICY set: cinfer does not re-exec itself (valgrind cannot follow that).
OMP_WAIT_POLICY=passive valgrind --tool=callgrind --callgrind-out-file="$OUT.%p" --instr-atstart=no \
  "$BIN" serve --model-repository examples/model_repository --host 127.0.0.1 --http-port $P \
  --load-model identity --model-control-mode explicit > "$work/serve.log" 2>&1 &
VP=$!
for _ in $(seq 300); do curl -sf localhost:$P/v2/health/ready >/dev/null && break; sleep 0.2; done
wrk -t1 -c4 -d2s -s "$work/post.lua" http://127.0.0.1:$P/v2/models/identity/infer >/dev/null
callgrind_control -i on $VP >/dev/null
out=$(wrk -t1 -c4 -d4s -s "$work/post.lua" http://127.0.0.1:$P/v2/models/identity/infer)
callgrind_control -i off $VP >/dev/null
n=$(echo "$out" | awk '/requests in/{print $1}')
callgrind_control -d $VP >/dev/null
kill $VP; wait $VP 2>/dev/null || true
f=$(ls -S "$OUT".* | head -1)
ir=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
echo "requests $n  instructions $ir  per request $((ir / n))  (profile: $f)"
