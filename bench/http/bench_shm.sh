#!/usr/bin/env bash
# bench_shm.sh: shared-memory inference against binary-over-HTTP (issue 19).
#   cinfer serve with the identity models; `cinfer bench` sends a 4 MiB FP32 tensor
#   (shape [2,524288]) and asks for the 4 MiB output, at concurrency 1 and 16:
#     shm:    --shared-memory system (input and output in registered POSIX regions; the
#             HTTP request carries only the JSON header, the response only the metadata)
#     binary: --binary (the tensor in the request body and the output in the response body)
#   for "identity" (dynamic batching: concurrent requests are batched, the batch copies
#   each input once) and "identity_fp32" (no batcher: one request per execution).
# Usage: bench/http/bench_shm.sh [WINDOW_MS] [MAX_WINDOWS]
set -euo pipefail
cd "$(dirname "$0")/../.."
WIN=${1:-2000}; NWIN=${2:-6}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 10000))
mkdir -p "$work/repo"
cp -r examples/model_repository/identity examples/model_repository/identity_fp32 "$work/repo/"
"$BIN" serve --model-repository "$work/repo" --host 127.0.0.1 --http-port $port \
  ${CINFER_ARGS:-} > "$work/cinfer.log" 2>&1 &
for _ in $(seq 100); do curl -sf localhost:$port/v2/health/ready >/dev/null && break; sleep 0.1; done

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for model in identity identity_fp32; do
  for mode in shm binary; do
    if [ $mode = shm ]; then flags="--shared-memory system --output-shared-memory-size 4194304"
    else flags="--binary"; fi
    "$BIN" bench --url http://127.0.0.1:$port --model $model --shape INPUT0:2,524288 $flags \
      --concurrency 1,16 --warmup-ms 500 --window-ms "$WIN" --max-windows "$NWIN" \
      --json "$work/$model-$mode.json" --quiet > "$work/$model-$mode.txt" 2>&1 || {
        cat "$work/$model-$mode.txt"; exit 1; }
    # the client-side table only (the server-side table that follows also has c= rows)
    awk -v m="$model" -v k="$mode" '/^level +req\/s/ {t = 1; next} /^$/ {t = 0}
      t && /^c=/ {printf "%-14s %-7s %-5s %10s req/s  p50 %9s ms  p99 %9s ms  errors %s\n", m, k, $1, $2, $3, $6, $10}' \
      "$work/$model-$mode.txt"
  done
done
echo "regions left registered after the runs: $(curl -s localhost:$port/v2/systemsharedmemory/status)"
