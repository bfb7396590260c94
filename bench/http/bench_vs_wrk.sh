#!/usr/bin/env bash
# bench_vs_wrk.sh: `cinfer bench --http-post` against `wrk` (with a Lua POST script) on the
# same nginx (static 200 response), the same body and the same 16 connections, in one run.
# The two tools alternate ROUNDS times so that drift on a shared machine hits both alike;
# the summary compares the medians. Target (issue 6): cinfer >= 0.8 x wrk requests/s.
#
# usage: bench/http/bench_vs_wrk.sh [BUILD_DIR]   env: CONNS=16 THREADS=2 SECS=8 ROUNDS=3
#        PLOT=FILE.svg also runs a concurrency sweep 1..64 on the same nginx and plots it
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
CINFER=$BUILD/src/cli/cinfer
CONNS=${CONNS:-16} THREADS=${THREADS:-2} SECS=${SECS:-8} ROUNDS=${ROUNDS:-3}
[ -x "$CINFER" ] || { echo "build first: $CINFER is missing" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed (Debian package wrk)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is not installed (Debian nginx-light)" >&2; exit 1; }

TMP=$(mktemp -d)
NGINX_PID=
cleanup() { [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$TMP/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $TMP/nginx.pid; error_log $TMP/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $TMP/b; proxy_temp_path $TMP/p; fastcgi_temp_path $TMP/f;
  uwsgi_temp_path $TMP/u; scgi_temp_path $TMP/s;
  keepalive_requests 100000000;
  server { listen 127.0.0.1:$PORT;
    location / { default_type application/json; return 200 '{"ok":true}\n'; } }
}
CONF
nginx -c "$TMP/nginx.conf" -p "$TMP" &
NGINX_PID=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done

BODY='{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
printf '%s' "$BODY" > "$TMP/body.json"
cat > "$TMP/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '$BODY'
wrk.headers["Content-Type"] = "application/json"
LUA

echo "nginx 127.0.0.1:$PORT (1 worker), POST /, $CONNS connections, $THREADS client threads, ${SECS}s per run, $ROUNDS rounds"
echo "machine: $(nproc) cores, $(uname -sr)"
# runs a command and appends the CPU seconds (user+sys) it used: "CPU_SECONDS x"
with_cpu() {
  python3 -c 'import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stdout.write(p.stdout)
print("CPU_SECONDS %.3f" % (r.ru_utime + r.ru_stime))' "$@"
}
wrk_rps=() cin_rps=() wrk_us=() cin_us=()
for r in $(seq "$ROUNDS"); do
  out=$(with_cpu wrk -t"$THREADS" -c"$CONNS" -d"${SECS}s" -s "$TMP/post.lua" "http://127.0.0.1:$PORT/")
  w=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  wus=$(awk '/requests in/ {n=$1} /^CPU_SECONDS/ {c=$2} END {printf "%.2f", c / n * 1e6}' <<<"$out")
  wrk_rps+=("$w") wrk_us+=("$wus")
  "$CINFER" bench --url "http://127.0.0.1:$PORT" --http-post / --body "$TMP/body.json" \
      --content-type application/json --concurrency "$CONNS" --threads "$THREADS" \
      --warmup-ms 1000 --window-ms $((SECS * 1000 / 4)) --max-windows 4 --json "$TMP/c.json" --quiet >/dev/null
  read -r c cus cerr < <(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["levels"][0]; print("%.2f %.2f %d" % (l["throughput_rps"], l["tool_cpu_pct"] / 100 / l["throughput_rps"] * 1e6, l["errors"]))' "$TMP/c.json")
  cin_rps+=("$c") cin_us+=("$cus")
  echo "round $r: wrk $w req/s ($wus us CPU/request) | cinfer bench $c req/s ($cus us CPU/request, $cerr errors)"
done
python3 - "${wrk_rps[*]}" "${cin_rps[*]}" "${wrk_us[*]}" "${cin_us[*]}" <<'PY'
import statistics, sys
w, c, wu, cu = ([float(x) for x in a.split()] for a in sys.argv[1:5])
mw, mc = statistics.median(w), statistics.median(c)
print(f"median: wrk {mw:.0f} req/s, cinfer bench {mc:.0f} req/s, ratio {mc / mw:.2f} (target >= 0.80)")
print(f"client CPU per request (median): wrk {statistics.median(wu):.2f} us, cinfer bench {statistics.median(cu):.2f} us")
PY
if [ -n "${PLOT:-}" ]; then
  "$CINFER" bench --url "http://127.0.0.1:$PORT" --http-post / --body "$TMP/body.json" \
      --content-type application/json --concurrency 1,2,4,8,16,32,64 --threads "$THREADS" \
      --warmup-ms 500 --window-ms 1000 --max-windows 5 --plot "$PLOT" --quiet
fi
