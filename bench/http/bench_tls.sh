#!/usr/bin/env bash
# bench_tls.sh: the TLS benchmark of issue 18, in one run (docs/benchmarks-net.md).
#   cinfer serve (identity model, plain HTTP) behind three front doors on loopback:
#     1. cinfer gateway, plain HTTP listener
#     2. cinfer gateway, TLS listener (TLS 1.3, P-256 certificate)
#     3. nginx terminating TLS with the same certificate, proxying to the same replica
#        (keep-alive upstream), the same 16-element FP32 JSON inference body
#   keep-alive requests/s of each with wrk (POST script), the TLS/plain ratio (target
#   >= 0.8) and the cinfer/nginx TLS ratio; then full TLS handshakes/s (openssl s_time -new:
#   one client, a new session per connection) against the gateway and nginx.
# Certificates are generated here with the openssl CLI and deleted on exit.
# Usage: bench/http/bench_tls.sh [DURATION_S] [CONNECTIONS] [WRK_THREADS]
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10}; CONN=${2:-16}; THREADS=${3:-2}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
base=$((20000 + RANDOM % 10000))
p_srv=$base; p_plain=$((base + 1)); p_tls=$((base + 2)); p_ng=$((base + 3))

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" \
  -out "$work/cert.pem" -days 1 -subj /CN=localhost \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" 2>/dev/null

body='{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":[0.5,1.5,2.5,3.5,4.5,5.5,6.5,7.5,8.5,9.5,10.5,11.5,12.5,13.5,14.5,15.5]}]}'
cat > "$work/post.lua" <<LUA
wrk.method = "POST"
wrk.body   = '$body'
wrk.headers["Content-Type"] = "application/json"
LUA

mkdir "$work/repo" && cp -r examples/model_repository/identity "$work/repo/"
"$BIN" serve --model-repository "$work/repo" --host 127.0.0.1 \
  --http-port $p_srv > "$work/serve.log" 2>&1 &
for _ in $(seq 200); do curl -sf localhost:$p_srv/v2/health/ready >/dev/null && break; sleep 0.1; done
"$BIN" gateway --upstream 127.0.0.1:$p_srv --host 127.0.0.1 --port $p_plain > "$work/gw1.log" 2>&1 &
"$BIN" gateway --upstream 127.0.0.1:$p_srv --host 127.0.0.1 --port $p_tls \
  --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" > "$work/gw2.log" 2>&1 &
cat > "$work/nginx.conf" <<NG
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx.err;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream replica { server 127.0.0.1:$p_srv; keepalive 64; }
  server {
    listen 127.0.0.1:$p_ng ssl;
    ssl_certificate $work/cert.pem;
    ssl_certificate_key $work/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    location = /healthz { return 200 'ok\n'; }
    location / { proxy_pass http://replica; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NG
nginx -c "$work/nginx.conf" -p "$work" -g 'daemon off;' &
url_plain=http://127.0.0.1:$p_plain/v2/models/identity/infer
url_tls=https://127.0.0.1:$p_tls/v2/models/identity/infer
url_ng=https://127.0.0.1:$p_ng/v2/models/identity/infer
for u in "$url_plain" "$url_tls" "$url_ng"; do
  for _ in $(seq 200); do
    curl -skf -XPOST "$u" -d "$body" >/dev/null && break; sleep 0.1
  done
done
same=$(for u in "$url_plain" "$url_tls" "$url_ng"; do curl -sk -XPOST "$u" -d "$body" | wc -c; done | sort -u | wc -l)
echo "response bodies of the same size through all three: $([ "$same" = 1 ] && echo yes || echo NO)"

rps() {  # url [extra wrk args]: requests/s
  local out; out=$(wrk -t$THREADS -c$CONN -d${DUR}s "$@")
  echo "$out" | awk '/Non-2xx|Socket errors/ {print "   errors: " $0 > "/dev/stderr"}'
  echo "$out" | awk '/Requests\/sec/ {print $2}'
}
wrk -t$THREADS -c$CONN -d2s -s "$work/post.lua" "$url_tls" >/dev/null  # warm-up
r_plain=$(rps -s "$work/post.lua" "$url_plain")
r_tls=$(rps -s "$work/post.lua" "$url_tls")
r_ng=$(rps -s "$work/post.lua" "$url_ng")
hs() {  # port: full handshakes/s (one client, no session resumption) by openssl s_time
  openssl s_time -connect 127.0.0.1:$1 -new -time $DUR 2>/dev/null |
    awk '/connections in/ && /real/ {gsub(/s$/, "", $4); print $1 / $4; exit}'
}
h_gw=$(hs $p_tls)
h_ng=$(hs $p_ng)
python3 - "$r_plain" "$r_tls" "$r_ng" "$h_gw" "$h_ng" <<PY
import sys
p, t, n, hg, hn = map(float, sys.argv[1:])
print(f"keep-alive identity req/s (wrk -t$THREADS -c$CONN -d${DUR}s):")
print(f"  gateway plain HTTP {p:9.0f}")
print(f"  gateway TLS        {t:9.0f}   TLS/plain {t/p:.2f} (target >= 0.8)")
print(f"  nginx TLS proxy    {n:9.0f}   cinfer/nginx {t/n:.2f}")
print(f"full TLS handshakes/s (openssl s_time -new, one client): gateway {hg:.0f}  nginx {hn:.0f}  ratio {hg/hn:.2f}")
PY
