#!/usr/bin/env bash
# bench_grpc_vs_http.sh: identity ModelInfer over gRPC against KServe HTTP (binary tensor
# data), measured with perf_analyzer (-i grpc / -i http: the same client program for both),
# against one server, alternating the protocols round by round (the machine is shared:
# alternation spreads the noise over both). Usage:
#   bench/grpc/bench_grpc_vs_http.sh [CONCURRENCIES="1 16"] [ROUNDS=2] [ELEMENTS=16] [REQUESTS_PER_WINDOW=5000]
# Prints markdown rows: protocol, concurrency, req/s, client p50 (µs), the server's CPU µs
# per request (its /proc utime+stime over the run / requests counted by its
# cinfer_request_success_total), the client's CPU µs per request (perf_analyzer's
# utime+stime / the same count), requests.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONCS=${1:-"1 16"}; ROUNDS=${2:-2}; ELEMS=${3:-16}; WIN=${4:-5000}
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
count() { curl -s "127.0.0.1:$http/metrics" | awk '/^cinfer_request_success_total\{model="identity"/ {s+=$2} END {print s+0}'; }
ticks() { awk '{print $14+$15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)
echo "| protocol | concurrency | req/s | p50 µs | server CPU µs/req | client CPU µs/req | requests |"
echo "|---|---|---|---|---|---|---|"
for c in $CONCS; do
  for r in $(seq "$ROUNDS"); do
    for proto in http grpc; do
      port=$http; [ $proto = grpc ] && port=$grpc
      n0=$(count); t0=$(ticks)
      out=$(LD_LIBRARY_PATH=$CUDART /usr/bin/time -f "CLIENTCPU %U %S" "$PA" -m identity \
            -u 127.0.0.1:$port -i $proto --shape INPUT0:$ELEMS --concurrency-range $c:$c \
            --measurement-mode count_windows --measurement-request-count $WIN \
            --stability-percentage 10000 --max-trials 3 --percentile 50 2>&1) || true
      n1=$(count); t1=$(ticks)
      tput=$(echo "$out" | grep -o 'Throughput: [0-9.]*' | tail -1 | cut -d' ' -f2 || true)
      p50=$(echo "$out" | grep -o 'p50 latency: [0-9]*' | tail -1 | cut -d' ' -f3 || true)
      cc=$(echo "$out" | awk '/^CLIENTCPU/ {print $2+$3}')
      if [ -z "$tput" ]; then echo "$out" | tail -4 >&2; fi
      awk -v p=$proto -v c=$c -v n=$((n1 - n0)) -v t=$((t1 - t0)) -v hz="$hz" -v tp="$tput" -v p50="$p50" -v cc="$cc" \
        'BEGIN {printf "| %s | %s | %s | %s | %.1f | %.1f | %d |\n", p, c, tp, p50, n ? t*1e6/hz/n : 0, n ? cc*1e6/n : 0, n}'
    done
  done
done
