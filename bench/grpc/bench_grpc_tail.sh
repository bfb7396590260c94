#!/usr/bin/env bash
# bench_grpc_tail.sh: the p99 tail at concurrency 16, interleaved rounds of a fixed request
# count with our own client: gRPC on 16 connections, gRPC with 16 streams on one
# connection, HTTP binary on 16 connections; prints per round the load average, the
# server's CPU per request (/proc utime+stime) and cinfer bench's summary row
# (req/s, p50, p90, p95, p99, p99.9, mean, std in ms). Usage:
#   bench/grpc/bench_grpc_tail.sh [ROUNDS=5] [REQUESTS=60000]
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}; N=${2:-60000}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
log=$(mktemp)
"$BIN" serve --model-repository examples/model_repository --host 127.0.0.1 --http-port 0 \
  --grpc-port 0 --model-control-mode explicit --load-model identity >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 200); do grep -q listening "$log" && break; sleep 0.05; done
http=$(grep -o 'http_port=[0-9]*' "$log" | cut -d= -f2)
grpc=$(grep -o 'grpc_port=[0-9]*' "$log" | cut -d= -f2)
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14+$15}' "/proc/$pid/stat"; }
for r in $(seq "$ROUNDS"); do
  for mode in grpc-16-conns grpc-1-conn http; do
    case $mode in
      grpc-16-conns) a=(--url "http://127.0.0.1:$grpc" --grpc) ;;
      grpc-1-conn) a=(--url "http://127.0.0.1:$grpc" --grpc --streams-per-connection 16) ;;
      http) a=(--url "http://127.0.0.1:$http" --binary) ;;
    esac
    t0=$(ticks); l=$(cut -d' ' -f1 /proc/loadavg)
    out=$("$BIN" bench "${a[@]}" --model identity --shape INPUT0:1,16 --concurrency 16 \
          --requests "$N" --quiet 2>&1 | grep '^c=16' | head -1 || true)
    t1=$(ticks)
    awk -v r="$r" -v m="$mode" -v l="$l" -v t=$((t1 - t0)) -v hz="$hz" -v n="$N" -v o="$out" \
      'BEGIN {printf "%s %-14s load=%s server_cpu_us_per_req=%.1f %s\n", r, m, l, t*1e6/hz/n, o}'
  done
done
