#!/bin/bash
# Two builds of the load generator, alternating, against one server: KServe identity over
# HTTP and gRPC, closed loop at concurrency 1 and 16, one client thread. For a change of the
# generator itself (e.g. its worker core): the server is the same binary for both, so what
# differs is the client. Prints one line per run with the load average before it.
#   bench/http/bench_ab_generator.sh OLD_CINFER NEW_CINFER [ROUNDS] [SERVER_CINFER]
set -euo pipefail
OLD=${1:?old cinfer binary}
NEW=${2:?new cinfer binary}
ROUNDS=${3:-6}
SRV_BIN=${4:-$OLD}
cd "$(dirname "$0")/../.."
OUT=$(mktemp -d)
HTTP=18733 GRPC=18734
"$SRV_BIN" serve --model-repository examples/model_repository --host 127.0.0.1 \
  --http-port $HTTP --grpc-port $GRPC --model-control-mode explicit --load-model identity \
  > "$OUT/server.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null; rm -rf "$OUT"' EXIT
for _ in $(seq 150); do
  curl -sf http://127.0.0.1:$HTTP/v2/models/identity/ready && break
  kill -0 $SRV 2>/dev/null || { cat "$OUT/server.log"; exit 1; }
  sleep 0.2
done
for round in $(seq "$ROUNDS"); do
  for which in OLD NEW; do
    BIN=${!which}
    for proto in http grpc; do
      if [ $proto = http ]; then U=(--url http://127.0.0.1:$HTTP); else U=(--url http://127.0.0.1:$GRPC --grpc); fi
      L=$(cut -d' ' -f1 /proc/loadavg)
      "$BIN" bench "${U[@]}" --model identity --shape INPUT0:1,16 --concurrency 1,16 --threads 1 \
        --warmup-ms 500 --window-ms 1000 --max-windows 3 --json "$OUT/r.json" --quiet > /dev/null
      python3 -c "
import json
d = json.load(open('$OUT/r.json'))
print('$round $which $proto load=$L', ' '.join('c%d=%.0f/s' % (l['concurrency'], l['throughput_rps']) for l in d['levels']))"
    done
  done
done
