#!/usr/bin/env bash
# bench_vs_nginx.sh: requests/s of the bare cinfer net layer (http_hello_server) vs nginx
# serving the same 60-byte JSON body, both with 2 workers on loopback, measured by wrk.
# Usage: tests/unit/net/bench_vs_nginx.sh [BUILD_DIR (default build)] [DURATION (default 5s)]
# Touches no system files: nginx runs from a temporary prefix; both use free ports.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${1:-build}
DUR=${2:-5s}
BODY='{"model":"hello","ready":true,"version":"1","x":"012345678"}'
tmp=$(mktemp -d)
NGINX_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$tmp/logs"
cat >"$tmp/nginx.conf" <<CONF
worker_processes 2;
pid $tmp/nginx.pid;
error_log $tmp/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $tmp; proxy_temp_path $tmp; fastcgi_temp_path $tmp;
  uwsgi_temp_path $tmp; scgi_temp_path $tmp;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$NGINX_PORT reuseport;
    location / { default_type application/json; return 200 '$BODY'; }
  }
}
CONF
"$BUILD/tests/unit/net/http_hello_server" 0 2 >"$tmp/hello.log" &
hello=$!
nginx -p "$tmp" -c "$tmp/nginx.conf"
trap 'kill $hello 2>/dev/null || true; kill "$(cat "$tmp/nginx.pid")" 2>/dev/null || true; rm -rf "$tmp"' EXIT
for i in $(seq 50); do
  HELLO_PORT=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/hello.log")
  [ -n "$HELLO_PORT" ] && curl -sf "http://127.0.0.1:$NGINX_PORT/" >/dev/null && break
  sleep 0.1  # startup poll, not synchronisation of a test
done
[ "$(curl -s http://127.0.0.1:$HELLO_PORT/)" = "$BODY" ] && [ "$(curl -s http://127.0.0.1:$NGINX_PORT/)" = "$BODY" ]
echo "== cinfer net (http_hello_server, 2 I/O threads)"
wrk -t2 -c16 -d"$DUR" http://127.0.0.1:$HELLO_PORT/
echo "== nginx $(nginx -v 2>&1 | sed 's/.*\///') (2 workers)"
wrk -t2 -c16 -d"$DUR" http://127.0.0.1:$NGINX_PORT/
