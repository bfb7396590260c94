#!/usr/bin/env bash
# compare_perf_analyzer.sh: issue 6's "cinfer bench and perf_analyzer agree" check, in one
# run against one `cinfer serve`: the identity model (the server's cost per request is a
# few tens of microseconds, below either client's own cost) and a simulated device with a
# fixed 2 ms execution, one instance, no batching (the server's cost dominates, so both
# clients measure the server). Prints both tables and perf_analyzer's own client-overhead
# line for identity.
# usage: bench/kserve/compare_perf_analyzer.sh   (env: BUILD=build CONC="1 4 16")
#   PIN=1: the server on CPU 0, both clients on CPU 1 (taskset), so that neither client's
#   own CPU use slows the server it measures (on 2 cores perf_analyzer's does).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
VENV=build/venv
export LD_LIBRARY_PATH="$(ls -d $VENV/lib/python3*/site-packages/nvidia/cuda_runtime/lib | head -1)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PERF_ANALYZER=$VENV/bin/perf_analyzer
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/repo/sim_fixed_5ms/1"
cp -r examples/model_repository/identity "$work/repo/"
cat > "$work/repo/sim_fixed_5ms/config.pbtxt" <<'PB'
# A SIMULATED device: every execution takes 5 ms, one at a time, no batching.
name: "sim_fixed_5ms"
backend: "sim"
max_batch_size: 0
input [ { name: "images" data_type: TYPE_UINT8 dims: [ 16 ] } ]
output [ { name: "boxes" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "base_us" value: { string_value: "5000" } }
parameters { key: "per_item_us" value: { string_value: "0" } }
PB
port=$((20000 + RANDOM % 20000))
srv_pin=(); cli_pin=()
if [ "${PIN:-0}" = 1 ]; then srv_pin=(taskset -c 0); cli_pin=(taskset -c 1); fi
"${srv_pin[@]}" "$BUILD/src/cli/cinfer" serve --threads 1 --model-repository "$work/repo" --host 127.0.0.1 --http-port $port \
  > "$work/serve.log" 2>&1 &
for _ in $(seq 100); do curl -sf localhost:$port/v2/health/ready >/dev/null && break; sleep 0.1; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -z "${SKIP_IDENTITY:-}" ]; then
echo "== identity, 16 FP32 values"
PA_ARGS="--shape INPUT0:16" CINFER_ARGS="--shape INPUT0:1,16" \
  "${cli_pin[@]}" bench/kserve/bench_vs_perf_analyzer.sh "http://127.0.0.1:$port" identity
"$PERF_ANALYZER" -m identity -u 127.0.0.1:$port -i http --concurrency-range 16:16 \
  --measurement-interval 2000 --shape INPUT0:16 2>&1 | grep -E "Avg HTTP time|Throughput" | sed 's/^ */  perf_analyzer c=16: /'
fi
echo "== sim_fixed_5ms (SIMULATED device, 5 ms per execution, no batching)"
CINFER_ARGS="--shape images:16" PA_ARGS="--shape images:16" \
  "${cli_pin[@]}" bench/kserve/bench_vs_perf_analyzer.sh "http://127.0.0.1:$port" sim_fixed_5ms
