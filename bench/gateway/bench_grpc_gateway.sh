#!/usr/bin/env bash
# bench_grpc_gateway.sh: the latency the gateway adds to gRPC, measured with perf_analyzer
# -i grpc: identity ModelInfer directly against one `cinfer serve` and through
# `cinfer gateway --grpc-port` in front of it, alternately in the same run (HTTP/binary the
# same way, for comparison). Usage:
#   bench/gateway/bench_grpc_gateway.sh [ELEMENTS=16] [REQUESTS_PER_WINDOW=5000] [ROUNDS=3]
# Prints one markdown row per (protocol, path, round): req/s, p50 and p99 (µs) at
# concurrency 1, then the added p50 (median over rounds).
# TOOL=cinfer measures with our own client instead (`cinfer bench --grpc` / `--binary`,
# REQUESTS_PER_WINDOW requests per run).
set -euo pipefail
cd "$(dirname "$0")/../.."
ELEMS=${1:-16}; WIN=${2:-5000}; ROUNDS=${3:-3}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
VENV=${CINFER_VENV:-/work/main/build/venv}
PA=$VENV/bin/perf_analyzer
CUDART=$("$VENV/bin/python" -c 'import nvidia.cuda_runtime as m; print(list(m.__path__)[0] + "/lib")')
slog=$(mktemp); glog=$(mktemp); gcfg=
"$BIN" serve --model-repository examples/model_repository --host 127.0.0.1 --http-port 0 \
  --grpc-port 0 --model-control-mode explicit --load-model identity >"$slog" 2>&1 &
spid=$!
gpid=
trap 'kill $spid $gpid 2>/dev/null; wait 2>/dev/null; rm -f "$slog" "$glog" "$gcfg" "${js:-}"' EXIT
for _ in $(seq 200); do grep -q "listening" "$slog" && break; sleep 0.05; done
shttp=$(grep -o 'http_port=[0-9]*' "$slog" | cut -d= -f2)
sgrpc=$(grep -o 'grpc_port=[0-9]*' "$slog" | cut -d= -f2)
gcfg=$(mktemp)  # perf_analyzer reads the model config: a public group for this bench
echo '{"auth":{"public_groups":["health","metadata","inference","model-config","statistics"]}}' >"$gcfg"
"$BIN" gateway --config "$gcfg" --host 127.0.0.1 --port 0 --grpc-port 0 --io-threads 1 \
  --upstream "127.0.0.1:$shttp,grpc=$sgrpc" >"$glog" 2>&1 &
gpid=$!
for _ in $(seq 200); do grep -q "listening" "$glog" && break; sleep 0.05; done
ghttp=$(grep -o 'http_port=[0-9]*' "$glog" | cut -d= -f2)
ggrpc=$(grep -o 'grpc_port=[0-9]*' "$glog" | cut -d= -f2)
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$ghttp/v2/models/identity/ready" >/dev/null && break; sleep 0.05; done
TOOL=${TOOL:-perf_analyzer}
js=$(mktemp)
run_cinfer() {  # proto port -> "tput p50 p99"
  local a=(--binary); [ "$1" = grpc ] && a=(--grpc)
  "$BIN" bench --url "http://127.0.0.1:$2" "${a[@]}" --model identity --shape "INPUT0:1,$ELEMS" \
    --requests "$WIN" --quiet --json "$js" >/dev/null 2>&1 || true
  "$VENV/bin/python" -c 'import json,sys; l=json.load(open(sys.argv[1]))["levels"][0]; print("%.0f %.0f %.0f" % (l["throughput_rps"], l["latency"]["p50_us"], l["latency"]["p99_us"]))' "$js"
}
run() {  # proto port -> "tput p50 p99"
  if [ "$TOOL" = cinfer ]; then run_cinfer "$@"; return; fi
  out=$(LD_LIBRARY_PATH=$CUDART "$PA" -m identity -u 127.0.0.1:$2 -i $1 \
        --shape INPUT0:$ELEMS --concurrency-range 1:1 --measurement-mode count_windows \
        --measurement-request-count $WIN --stability-percentage 10000 --max-trials 3 2>&1) || true
  tput=$(echo "$out" | grep -o 'Throughput: [0-9.]* infer/sec' | tail -1 | grep -o '[0-9.]*' || true)
  p50=$(echo "$out" | grep -o 'p50 latency: [0-9]* usec' | tail -1 | grep -o '[0-9]* usec' | grep -o '[0-9]*' || true)
  p99=$(echo "$out" | grep -o 'p99 latency: [0-9]* usec' | tail -1 | grep -o '[0-9]* usec' | grep -o '[0-9]*' || true)
  [ -n "$tput" ] || echo "$out" | tail -5 >&2
  echo "$tput $p50 $p99"
}
echo "| protocol | path | round | req/s | p50 µs | p99 µs |"
echo "|---|---|---|---|---|---|"
declare -A added
for r in $(seq "$ROUNDS"); do
  for proto in grpc http; do
    dport=$sgrpc; gport=$ggrpc
    [ $proto = http ] && dport=$shttp && gport=$ghttp
    read -r dt dp50 dp99 <<<"$(run $proto $dport)"
    read -r gt gp50 gp99 <<<"$(run $proto $gport)"
    echo "| $proto | direct | $r | $dt | $dp50 | $dp99 |"
    echo "| $proto | gateway | $r | $gt | $gp50 | $gp99 |"
    added[$proto]+="$((gp50 - dp50)) "
  done
done
for proto in grpc http; do
  med=$(echo ${added[$proto]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  echo "added p50 through the gateway, $proto: $med µs (rounds: ${added[$proto]})"
done
