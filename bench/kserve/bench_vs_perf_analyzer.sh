#!/usr/bin/env bash
# bench_vs_perf_analyzer.sh: `cinfer bench` and Triton's perf_analyzer on the same KServe v2
# model at the same concurrencies, one after the other, binary tensors, same stability
# rule; prints throughput and p50 side by side and their ratio (issue 6: agree within 10%
# at concurrency 1, 4 and 16 on the identity model).
#
# usage: bench/kserve/bench_vs_perf_analyzer.sh URL MODEL [extra args for both, e.g. --shape X:1,3]
#   env: BUILD=build  CONC="1 4 16"  WINDOW_MS=2000  STABILITY=10
#        PERF_ANALYZER=perf_analyzer (tritonclient 2.40.0's manylinux wheel ships one in
#        bin/; it needs libcudart.so.12, e.g. from the nvidia-cuda-runtime-cu12 wheel, on
#        LD_LIBRARY_PATH)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { sed -n 2,12p "$0"; exit 2; }
URL=$1 MODEL=$2
shift 2
BUILD=${BUILD:-build} CONC=${CONC:-1 4 16} WINDOW_MS=${WINDOW_MS:-2000} STABILITY=${STABILITY:-10}
PA=${PERF_ANALYZER:-perf_analyzer}
command -v "$PA" >/dev/null || { echo "perf_analyzer not found (set PERF_ANALYZER)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
HOSTPORT=${URL#http://}
printf "%-5s %14s %14s %8s %12s %12s %8s\n" conc "pa infer/s" "cinfer req/s" ratio "pa p50 us" "cinfer p50" ratio
for c in $CONC; do
  # perf_analyzer's --shape takes NAME:D1,D2 like ours
  "$PA" -m "$MODEL" -u "$HOSTPORT" -i http --concurrency-range "$c:$c" \
      --measurement-interval "$WINDOW_MS" --stability-percentage "$STABILITY" \
      -f "$TMP/pa.csv" "$@" >"$TMP/pa.log" 2>&1 || { cat "$TMP/pa.log" >&2; exit 1; }
  read -r pa_tput pa_p50 < <(python3 -c 'import csv,sys
r = next(csv.DictReader(open(sys.argv[1])))
print(r["Inferences/Second"], r["p50 latency"])' "$TMP/pa.csv")
  "$BUILD/src/cli/cinfer" bench --url "$URL" --model "$MODEL" --binary --concurrency "$c" \
      --window-ms "$WINDOW_MS" --stability "$STABILITY" --json "$TMP/c.json" --quiet "$@" >/dev/null
  read -r c_tput c_p50 < <(python3 -c 'import json,sys
l = json.load(open(sys.argv[1]))["levels"][0]
print(l["throughput_rps"], l["latency"]["p50_us"])' "$TMP/c.json")
  python3 -c 'import sys
c, pt, ct, pp, cp = sys.argv[1], *map(float, sys.argv[2:])
print("%-5s %14.1f %14.1f %8.2f %12.0f %12.0f %8.2f" % (c, pt, ct, ct / pt, pp, cp, cp / pp))' \
      "$c" "$pa_tput" "$c_tput" "$pa_p50" "$c_p50"
done
