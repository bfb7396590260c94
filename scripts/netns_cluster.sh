#!/usr/bin/env bash
# netns_cluster.sh: a multi-host cinfer cluster on one Linux machine, from network
# namespaces joined by veth pairs to a bridge (which lives in its own namespace, so the
# host's network is never touched). Needs root (ip netns).
#
#   hosts:   cgw-gw    10.77.0.2   the gateway (port 8080)
#            cgw-load  10.77.0.3   the load generator
#            cgw-rK    10.77.0.1K  replica K (port 8000), K = 1..N (N <= 9)
#            cgw-br                the bridge "switch"
#
# usage:
#   scripts/netns_cluster.sh up N                 create namespaces and links
#   scripts/netns_cluster.sh start N [REPO]       start N replicas (cinfer serve) + gateway
#   scripts/netns_cluster.sh exec HOST CMD...     run a command in a host (gw, load, r1..)
#   scripts/netns_cluster.sh kill K [SIGNAL]      signal replica K (default KILL)
#   scripts/netns_cluster.sh add K                add replica K to the gateway's upstreams file
#   scripts/netns_cluster.sh stop                 stop every process started here
#   scripts/netns_cluster.sh down                 stop and delete everything
#   scripts/netns_cluster.sh selftest [N]         up N (3), start, load from cgw-load while
#                                                 replica 2 is killed with -9, replica 3 gets
#                                                 SIGTERM; prints the errors (expect 0); down
# Environment: CINFER_BIN (default build/src/cli/cinfer), STATE (default /tmp/cinfer-netns).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${CINFER_BIN:-$ROOT/build/src/cli/cinfer}"
STATE="${STATE:-/tmp/cinfer-netns}"
NET=10.77.0

die() { echo "netns_cluster: $*" >&2; exit 1; }
ns() { echo "cgw-$1"; }

link_host() {  # name ip
  local name=$1 ip=$2 n
  n=$(ns "$name")
  ip netns add "$n"
  ip link add "v-$name" type veth peer name "b-$name"
  ip link set "v-$name" netns "$n"
  ip link set "b-$name" netns cgw-br
  ip -n "$n" addr add "$ip/24" dev "v-$name"
  ip -n "$n" link set "v-$name" up
  ip -n "$n" link set lo up
  ip -n cgw-br link set "b-$name" master br0
  ip -n cgw-br link set "b-$name" up
}

cmd_up() {
  local n=${1:-3}
  [ "$n" -ge 1 ] && [ "$n" -le 9 ] || die "N must be 1..9"
  [ "$(id -u)" = 0 ] || die "needs root"
  ip netns list | grep -q '^cgw-br' && die "already up (run: $0 down)"
  ip netns add cgw-br
  ip -n cgw-br link add br0 type bridge
  ip -n cgw-br link set br0 up
  link_host gw "$NET.2"
  link_host load "$NET.3"
  for k in $(seq 1 "$n"); do link_host "r$k" "$NET.1$k"; done
  mkdir -p "$STATE"
  echo "$n" > "$STATE/n"
  echo "up: gateway $NET.2, load $NET.3, replicas $NET.11..$NET.1$n"
}

start_bg() {  # pidname host cmd...
  local name=$1 host=$2
  shift 2
  ip netns exec "$(ns "$host")" "$@" > "$STATE/$name.log" 2>&1 &
  echo $! > "$STATE/$name.pid"
}

wait_http() {  # host url
  for _ in $(seq 1 300); do
    if ip netns exec "$(ns "$1")" curl -sf -o /dev/null "$2"; then return 0; fi
    sleep 0.1
  done
  die "$2 not ready (from $1)"
}

cmd_start() {
  local n=${1:-$(cat "$STATE/n")} repo=${2:-$ROOT/examples/model_repository}
  [ -x "$BIN" ] || die "no binary at $BIN (build first or set CINFER_BIN)"
  : > "$STATE/upstreams"
  for k in $(seq 1 "$n"); do
    start_bg "r$k" "r$k" "$BIN" serve --model-repository "$repo" --host "$NET.1$k" \
      --http-port 8000 --threads 2 --exit-timeout-secs 10
    echo "$NET.1$k:8000" >> "$STATE/upstreams"
  done
  for k in $(seq 1 "$n"); do wait_http "r$k" "http://$NET.1$k:8000/v2/health/ready"; done
  cat > "$STATE/gateway.json" <<EOF
{"upstreams": {"file": "$STATE/upstreams", "file_interval_ms": 200, "models_interval_ms": 1000},
 "health": {"interval_ms": 500, "timeout_ms": 300, "unhealthy_threshold": 2, "healthy_threshold": 1},
 "outlier": {"consecutive_failures": 3, "base_ejection_ms": 10000},
 "retry": {"budget_min": 64}}
EOF
  start_bg gw gw "$BIN" gateway --config "$STATE/gateway.json" --host "$NET.2" --port 8080 --io-threads 2
  wait_http load "http://$NET.2:8080/readyz"
  echo "started: $n replicas, gateway at http://$NET.2:8080 (status: /status)"
}

cmd_exec() {
  local host=$1
  shift
  ip netns exec "$(ns "$host")" "$@"
}

cmd_kill() {
  local k=$1 sig=${2:-KILL}
  kill -s "$sig" "$(cat "$STATE/r$k.pid")"
}

cmd_add() {
  local k=$1
  echo "$NET.1$k:8000" >> "$STATE/upstreams"
}

cmd_stop() {
  for f in "$STATE"/*.pid; do
    [ -e "$f" ] || continue
    local pid
    pid=$(cat "$f")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

cmd_down() {
  cmd_stop
  for n in $(ip netns list | awk '{print $1}' | grep '^cgw-' || true); do ip netns del "$n"; done
  echo "down"
}

cmd_selftest() {
  local n=${1:-3}
  trap cmd_down EXIT
  cmd_up "$n"
  cmd_start "$n"
  local out="$STATE/bench.json"
  ip netns exec cgw-load "$BIN" bench --url "http://$NET.2:8080" --model sim_detector \
    --shape images:1,16 --concurrency 16 --warmup-ms 500 --window-ms 2000 --max-windows 4 \
    --stability 100 --json "$out" --quiet > "$STATE/bench.log" 2>&1 &
  local bpid=$!
  sleep 2
  echo "kill -9 replica 2"
  cmd_kill 2 KILL
  sleep 2
  if [ "$n" -ge 3 ]; then echo "SIGTERM replica 3"; cmd_kill 3 TERM; fi
  wait "$bpid" || true
  python3 - "$out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for lv in d["levels"]:
    print(f"requests {lv['requests']}  rps {lv['throughput_rps']:.0f}  errors {lv['errors']}  "
          f"p50 {lv['latency']['p50_us']/1000:.2f} ms  p99 {lv['latency']['p99_us']/1000:.2f} ms")
    sys.exit(1 if lv["errors"] else 0)
EOF
  ip netns exec cgw-load curl -s "http://$NET.2:8080/status.json"; echo
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  start) shift; cmd_start "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  kill) shift; cmd_kill "$@" ;;
  add) shift; cmd_add "$@" ;;
  stop) cmd_stop ;;
  down) cmd_down ;;
  selftest) shift; cmd_selftest "$@" ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac
