#!/usr/bin/env bash
# bench_grpc_tools.sh: identity ModelInfer, 16 FP32 elements, against one `cinfer serve`:
# our own load generator (`cinfer bench --grpc`, and `cinfer bench` over HTTP with binary
# tensors) and perf_analyzer (-i grpc, -i http) side by side, the four alternating round by
# round (the machine is shared: alternation spreads the noise). Usage:
#   bench/grpc/bench_grpc_tools.sh [CONCURRENCIES="1 16"] [ROUNDS=2] [EXTRA_CINFER_GRPC_FLAGS]
# e.g. EXTRA "--streams-per-connection 6" puts 6 users on one HTTP/2 connection, as
# perf_analyzer's shared gRPC channel does. Prints markdown rows: tool, protocol,
# concurrency, req/s, p50 µs, p99 µs, the load average when the row was measured.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONCS=${1:-"1 16"}; ROUNDS=${2:-2}; EXTRA=${3:-}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
VENV=${CINFER_VENV:-/work/main/build/venv}
PA=$VENV/bin/perf_analyzer
CUDART=$("$VENV/bin/python" -c 'import nvidia.cuda_runtime as m; print(list(m.__path__)[0] + "/lib")')
log=$(mktemp); js=$(mktemp)
"$BIN" serve --model-repository examples/model_repository --host 127.0.0.1 --http-port 0 \
  --grpc-port 0 --model-control-mode explicit --load-model identity >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log" "$js"' EXIT
for _ in $(seq 200); do grep -q "listening" "$log" && break; sleep 0.05; done
http=$(grep -o 'http_port=[0-9]*' "$log" | cut -d= -f2)
grpc=$(grep -o 'grpc_port=[0-9]*' "$log" | cut -d= -f2)
load() { cut -d' ' -f1 /proc/loadavg; }
echo "| tool | protocol | concurrency | req/s | p50 µs | p99 µs | load |"
echo "|---|---|---|---|---|---|---|"
for c in $CONCS; do
  for r in $(seq "$ROUNDS"); do
    for tool in cinfer-grpc cinfer-http pa-grpc pa-http; do
      case $tool in
        cinfer-*)
          if [ $tool = cinfer-grpc ]; then args=(--url "http://127.0.0.1:$grpc" --grpc $EXTRA); proto=gRPC
          else args=(--url "http://127.0.0.1:$http" --binary); proto=HTTP; fi
          "$BIN" bench "${args[@]}" --model identity --shape INPUT0:1,16 --concurrency "$c" \
            --warmup-ms 500 --window-ms 1000 --max-windows 6 --quiet --json "$js" >/dev/null 2>&1 || true
          "$VENV/bin/python" - "$js" "$tool" "$proto" "$c" "$(load)" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["levels"][0]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {j['throughput_rps']:.0f} | "
      f"{j['latency']['p50_us']:.0f} | {j['latency']['p99_us']:.0f} | {sys.argv[5]} |")
PY
          ;;
        pa-*)
          proto=${tool#pa-}; port=$http; [ $proto = grpc ] && port=$grpc
          out=$(LD_LIBRARY_PATH=$CUDART "$PA" -m identity -u 127.0.0.1:$port -i $proto \
                --shape INPUT0:16 --concurrency-range $c:$c --measurement-mode count_windows \
                --measurement-request-count 5000 --stability-percentage 10000 --max-trials 3 2>&1) || true
          tput=$(echo "$out" | grep -o 'Throughput: [0-9.]*' | tail -1 | cut -d' ' -f2 || true)
          p50=$(echo "$out" | grep -o 'p50 latency: [0-9]*' | tail -1 | cut -d' ' -f3 || true)
          p99=$(echo "$out" | grep -o 'p99 latency: [0-9]*' | tail -1 | cut -d' ' -f3 || true)
          [ $proto = grpc ] && P=gRPC || P=HTTP
          echo "| perf_analyzer | $P | $c | ${tput%.*} | $p50 | $p99 | $(load) |"
          ;;
      esac
    done
  done
done
