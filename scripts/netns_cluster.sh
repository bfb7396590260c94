#!/usr/bin/env bash
# netns_cluster.sh: a multi-host cinfer cluster on one Linux machine, from network
# namespaces joined by veth pairs to a bridge (which lives in its own namespace, so the
# host's network is never touched: every link is created directly inside its namespaces).
# Needs root (ip netns).
#
#   hosts:   P-gw    10.77.0.2   the gateway (port 8080)
#            P-load  10.77.0.3   the load generator
#            P-rK    10.77.0.1K  replica K (port 8000), K = 1..N (N <= 9)
#            P-br                the bridge "switch"
#   P is $CGW_PREFIX (default cgw; 1..10 lower-case letters or digits): clusters with
#   different prefixes do not collide (the addresses live behind each cluster's own bridge).
#
# usage:
#   scripts/netns_cluster.sh up N                 create namespaces and links
#   scripts/netns_cluster.sh start N [REPO]       start N replicas (cinfer serve) + gateway
#   scripts/netns_cluster.sh replica K [REPO]     start replica K alone, wait until ready
#   scripts/netns_cluster.sh gateway CONFIG       start the gateway with a JSON config, wait
#                                                 until it answers /healthz
#   scripts/netns_cluster.sh exec HOST CMD...     run a command in a host (gw, load, r1..)
#   scripts/netns_cluster.sh kill K [SIGNAL]      signal replica K (default KILL)
#   scripts/netns_cluster.sh add K [ATTR...]      add replica K to the gateway's upstreams file
#                                                 (ATTR: group=NAME weight=N)
#   scripts/netns_cluster.sh stop                 stop every process started here
#   scripts/netns_cluster.sh down                 stop and delete everything
#   scripts/netns_cluster.sh selftest [N [REPO]]  up N (3), start, load from P-load while
#                                                 replica 2 is killed with -9, replica 3 gets
#                                                 SIGTERM; prints the errors (expect 0); down
# Processes: STATE/NAME.pid, NAME.log, NAME.rc (exit status, written when it ends);
# NAME is gw or rK.
# Environment: CINFER_BIN (default build/src/cli/cinfer), CGW_PREFIX (default cgw),
# STATE (default /tmp/cinfer-netns-$CGW_PREFIX).
# tests/integration/test_gateway_netns.py drives it (see docs/gateway.md, "Tests").
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${CINFER_BIN:-$ROOT/build/src/cli/cinfer}"
PREFIX="${CGW_PREFIX:-cgw}"
STATE="${STATE:-/tmp/cinfer-netns-$PREFIX}"
NET=10.77.0

die() { echo "netns_cluster: $*" >&2; exit 1; }
[[ "$PREFIX" =~ ^[a-z0-9]{1,10}$ ]] || die "CGW_PREFIX must be 1..10 lower-case letters or digits"
ns() { echo "$PREFIX-$1"; }

link_host() {  # name ip
  local name=$1 ip=$2 n
  n=$(ns "$name")
  ip netns add "$n"
  ip link add "v-$name" netns "$n" type veth peer name "b-$name" netns "$(ns br)"
  ip -n "$n" addr add "$ip/24" dev "v-$name"
  ip -n "$n" link set "v-$name" up
  ip -n "$n" link set lo up
  ip -n "$(ns br)" link set "b-$name" master br0
  ip -n "$(ns br)" link set "b-$name" up
}

cmd_up() {
  local n=${1:-3}
  [ "$n" -ge 1 ] && [ "$n" -le 9 ] || die "N must be 1..9"
  [ "$(id -u)" = 0 ] || die "needs root"
  ip netns list | awk '{print $1}' | grep -qx "$(ns br)" && die "already up (run: $0 down)"
  ip netns add "$(ns br)"
  ip -n "$(ns br)" link add br0 type bridge
  ip -n "$(ns br)" link set br0 up
  link_host gw "$NET.2"
  link_host load "$NET.3"
  for k in $(seq 1 "$n"); do link_host "r$k" "$NET.1$k"; done
  mkdir -p "$STATE"
  echo "$n" > "$STATE/n"
  echo "up: gateway $NET.2, load $NET.3, replicas $NET.11..$NET.1$n"
}

start_bg() {  # name host cmd...: NAME.pid at once, NAME.log, NAME.rc (exit status) when it ends
  local name=$1 host=$2
  shift 2
  rm -f "$STATE/$name.pid" "$STATE/$name.rc"
  ( ip netns exec "$(ns "$host")" "$@" > "$STATE/$name.log" 2>&1 &
    echo $! > "$STATE/$name.pid.tmp"
    mv "$STATE/$name.pid.tmp" "$STATE/$name.pid"
    rc=0; wait $! || rc=$?
    echo "$rc" > "$STATE/$name.rc" ) > /dev/null 2>&1 &
  for _ in $(seq 1 200); do [ -e "$STATE/$name.pid" ] && return 0; sleep 0.01; done
  die "$name did not start"
}

wait_http() {  # name host url: polls (bounded) until url answers 2xx; fails fast if name exits
  local name=$1 host=$2 url=$3
  for _ in $(seq 1 600); do
    if ip netns exec "$(ns "$host")" curl -sf -m 2 -o /dev/null "$url"; then return 0; fi
    [ -e "$STATE/$name.rc" ] && die "$name exited with $(cat "$STATE/$name.rc"): $(tail -5 "$STATE/$name.log")"
    sleep 0.05
  done
  die "$url not ready after 600 polls (from $host)"
}

start_replica() {  # K REPO
  local k=$1 repo=$2
  [ -x "$BIN" ] || die "no binary at $BIN (build first or set CINFER_BIN)"
  start_bg "r$k" "r$k" "$BIN" serve --model-repository "$repo" --host "$NET.1$k" \
    --http-port 8000 --threads 2 --exit-timeout-secs 10
}

cmd_replica() {
  local k=$1 repo=${2:-$ROOT/examples/model_repository}
  start_replica "$k" "$repo"
  wait_http "r$k" "r$k" "http://$NET.1$k:8000/v2/health/ready"
}

cmd_gateway() {
  local config=$1
  [ -x "$BIN" ] || die "no binary at $BIN (build first or set CINFER_BIN)"
  start_bg gw gw "$BIN" gateway --config "$config" --host "$NET.2" --port 8080 --io-threads 2
  wait_http gw load "http://$NET.2:8080/healthz"
}

cmd_start() {
  local n=${1:-$(cat "$STATE/n")} repo=${2:-$ROOT/examples/model_repository}
  : > "$STATE/upstreams"
  for k in $(seq 1 "$n"); do
    start_replica "$k" "$repo"
    echo "$NET.1$k:8000" >> "$STATE/upstreams"
  done
  for k in $(seq 1 "$n"); do wait_http "r$k" "r$k" "http://$NET.1$k:8000/v2/health/ready"; done
  cat > "$STATE/gateway.json" <<EOF
{"upstreams": {"file": "$STATE/upstreams", "file_interval_ms": 200, "models_interval_ms": 1000},
 "health": {"interval_ms": 500, "timeout_ms": 300, "unhealthy_threshold": 2, "healthy_threshold": 1},
 "outlier": {"consecutive_failures": 3, "base_ejection_ms": 10000},
 "retry": {"budget_min": 64}}
EOF
  cmd_gateway "$STATE/gateway.json"
  wait_http gw load "http://$NET.2:8080/readyz"
  echo "started: $n replicas, gateway at http://$NET.2:8080 (status: /status)"
}

cmd_exec() {
  local host=$1
  shift
  ip netns exec "$(ns "$host")" "$@"
}

running() {  # name: started here and not ended (its rc file is written when it ends, so a
               # recycled pid is never signalled)
  [ -e "$STATE/$1.pid" ] && [ ! -e "$STATE/$1.rc" ]
}

cmd_kill() {
  local k=$1 sig=${2:-KILL}
  running "r$k" || die "replica $k is not running"
  kill -s "$sig" "$(cat "$STATE/r$k.pid")"
}

cmd_add() {
  local k=$1
  shift
  echo "$NET.1$k:8000 $*" >> "$STATE/upstreams"
}

cmd_stop() {  # SIGTERM to every running process (the gateway first), wait (bounded), SIGKILL
  local f name
  for f in "$STATE"/gw.pid "$STATE"/r*.pid; do
    name=$(basename "$f" .pid)
    if running "$name"; then kill -TERM "$(cat "$f")" 2>/dev/null || true; fi
  done
  for f in "$STATE"/gw.pid "$STATE"/r*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    for _ in $(seq 1 300); do running "$name" || break; sleep 0.05; done
    if running "$name"; then kill -KILL "$(cat "$f")" 2>/dev/null || true; fi
    for _ in $(seq 1 200); do [ -e "$STATE/$name.rc" ] && break; sleep 0.01; done
    rm -f "$f"
  done
}

cmd_down() {
  if [ -d "$STATE" ]; then cmd_stop; fi
  for n in $(ip netns list | awk '{print $1}' | grep "^$PREFIX-" || true); do ip netns del "$n"; done
  echo "down"
}

cmd_selftest() {
  local n=${1:-3} repo=${2:-$ROOT/examples/model_repository}
  trap cmd_down EXIT
  cmd_up "$n"
  cmd_start "$n" "$repo"
  local out="$STATE/bench.json"
  ip netns exec "$(ns load)" "$BIN" bench --url "http://$NET.2:8080" --model sim_detector \
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
  ip netns exec "$(ns load)" curl -s "http://$NET.2:8080/status.json"; echo
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  start) shift; cmd_start "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  kill) shift; cmd_kill "$@" ;;
  add) shift; cmd_add "$@" ;;
  replica) shift; cmd_replica "$@" ;;
  gateway) shift; cmd_gateway "$@" ;;
  stop) cmd_stop ;;
  down) cmd_down ;;
  selftest) shift; cmd_selftest "$@" ;;
  *) sed -n '2,35p' "$0"; exit 2 ;;
esac
