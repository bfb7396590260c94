#!/usr/bin/env bash
# bench_identity_vs_nginx.sh: the HTTP overhead benchmark of issue 2, in one run.
#   cinfer serve, identity model, 16-element FP32 JSON inference over keep-alive HTTP,
#   driven by wrk with a POST script at 16 connections,
#   against nginx returning a static JSON body of the same size, same wrk settings.
# Prints requests/s of both, their ratio, and cinfer's server-side p50/p99 for the request
# (from its cinfer_request_duration_seconds histogram, interpolated within buckets).
# Usage: bench/http/bench_identity_vs_nginx.sh [DURATION_S] [CONNECTIONS] [WRK_THREADS]
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10}; CONN=${2:-16}; THREADS=${3:-2}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
port_c=$((20000 + RANDOM % 10000)); port_n=$((port_c + 1))

body='{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":[0.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5,11.5,12.5,13.5,14.5,15.5]}]}'
cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body   = '$body'
wrk.headers["Content-Type"] = "application/json"
LUA

"$BIN" serve --model-repository examples/model_repository --host 127.0.0.1 \
  --http-port $port_c ${CINFER_ARGS:-} > "$work/cinfer.log" 2>&1 &
for _ in $(seq 100); do curl -sf localhost:$port_c/v2/health/ready >/dev/null && break; sleep 0.1; done
resp=$(curl -s -XPOST localhost:$port_c/v2/models/identity/infer -d "$body")
printf '%s' "$resp" > "$work/static.json"

# nginx answers with the same bytes cinfer sent (a static body; POST is allowed by 'return').
cat > "$work/nginx.conf" <<NG
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$port_n;
    location / { default_type application/json; return 200 '$resp'; }
  }
}
NG
nginx -c "$work/nginx.conf" -p "$work" -g 'daemon off;' &
for _ in $(seq 100); do curl -sf -XPOST localhost:$port_n/ >/dev/null && break; sleep 0.1; done

echo "cinfer response: ${#resp} bytes; nginx body: $(curl -s -XPOST localhost:$port_n/ | wc -c) bytes"
wrk -t$THREADS -c$CONN -d2s -s "$work/post.lua" http://127.0.0.1:$port_c/v2/models/identity/infer >/dev/null  # warm-up
rc=$(wrk -t$THREADS -c$CONN -d${DUR}s -s "$work/post.lua" http://127.0.0.1:$port_c/v2/models/identity/infer)
rn=$(wrk -t$THREADS -c$CONN -d${DUR}s -s "$work/post.lua" http://127.0.0.1:$port_n/)
c_rps=$(echo "$rc" | awk '/Requests\/sec/ {print $2}')
n_rps=$(echo "$rn" | awk '/Requests\/sec/ {print $2}')
c_err=$(echo "$rc" | awk '/Non-2xx|Socket errors/' || true)
echo "--- cinfer (identity, wrk -t$THREADS -c$CONN -d${DUR}s)"; echo "$rc" | sed -n '3,5p;/Requests/p'
echo "--- nginx (static JSON)"; echo "$rn" | sed -n '3,5p;/Requests/p'
[ -n "$c_err" ] && echo "cinfer errors: $c_err"
curl -s localhost:$port_c/metrics > "$work/metrics.txt"
python3 - "$work/metrics.txt" "$c_rps" "$n_rps" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
b = [(float(m.group(1)) if m.group(1) != "+Inf" else float("inf"), float(m.group(2)))
     for m in re.finditer(r'cinfer_request_duration_seconds_bucket\{model="identity",version="1",le="([^"]+)"\} (\S+)', text)]
total = b[-1][1]
def q(p):
    want, prev_le, prev_c = p * total, 0.0, 0.0
    for le, c in b:
        if c >= want:
            if le == float("inf"): return prev_le
            return prev_le + (le - prev_le) * ((want - prev_c) / max(c - prev_c, 1))
        prev_le, prev_c = le, c
c, n = float(sys.argv[2]), float(sys.argv[3])
print(f"requests/s: cinfer {c:.0f}  nginx {n:.0f}  ratio {c/n:.2f}  (target >= 0.5)")
print(f"server-side request time over {int(total)} requests: p50 {q(0.5)*1e6:.1f} us  p99 {q(0.99)*1e6:.1f} us")
PY
