#!/usr/bin/env bash
# bench_grpc_vs_http.sh: identity ModelInfer over gRPC against KServe HTTP (binary tensor
# data) at concurrency 1 and 16, side by side in one run, measured with perf_analyzer
# (the same client for both protocols). Usage:
#   bench/grpc/bench_grpc_vs_http.sh [ELEMENTS=16] [REQUESTS_PER_WINDOW=20000]
# Prints one markdown row per protocol and concurrency: req/s, client p50 and p99 (µs).
set -euo pipefail
cd "$(dirname "$0")/../.."
ELEMS=${1:-16}; WIN=${2:-20000}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
VENV=${CINFER_VENV:-/work/main/build/venv}
PA=$VENV/bin/perf_analyzer
CUDART=$("$VENV/bin/python" -c 'import nvidia.cuda_runtime as m; print(list(m.__path__)[0] + "/lib")')
log=$(mktemp)
"$BIN" serve --model-repository examples/model_repository --host 127.0.0.1 --http-port 0 \
  --grpc-port 0 --model-control-mode explicit --load-model identity >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 200); do grep -q "listening" "$log" && break; sleep 0.05; done
http=$(grep -o 'http_port=[0-9]*' "$log" | cut -d= -f2)
grpc=$(grep -o 'grpc_port=[0-9]*' "$log" | cut -d= -f2)
echo "| protocol | concurrency | req/s | p50 µs | p99 µs |"
echo "|---|---|---|---|---|"
for c in 1 16; do
  for proto in http grpc; do
    port=$http; [ $proto = grpc ] && port=$grpc
    out=$(LD_LIBRARY_PATH=$CUDART "$PA" -m identity -u 127.0.0.1:$port -i $proto \
          --shape INPUT0:$ELEMS --concurrency-range $c:$c --measurement-mode count_windows --measurement-request-count $WIN \
          --stability-percentage 10000 --max-trials 3 --percentile 50 2>&1) || true
    tput=$(echo "$out" | grep -o 'Throughput: [0-9.]* infer/sec' | tail -1 | grep -o '[0-9.]*' || true)
    p50=$(echo "$out" | grep -o 'p50 latency: [0-9]* usec' | tail -1 | sed 's/[^0-9]*50 latency: //; s/ usec//' || true)
    p99=$(echo "$out" | grep -o 'p99 latency: [0-9]* usec' | tail -1 | sed 's/[^0-9]*99 latency: //; s/ usec//' || true)
    if [ -z "$tput" ]; then echo "$out" | tail -5 >&2; fi
    echo "| $proto | $c | $tput | $p50 | $p99 |"
  done
done
