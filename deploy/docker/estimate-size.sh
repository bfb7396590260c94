#!/usr/bin/env bash
# estimate-size.sh: estimate the CPU runtime image's size without a Docker engine.
#   deploy/docker/estimate-size.sh [path/to/cinfer]
# Method: the runtime stage adds (a) the dependency closure of the packages it installs, minus
# what debian:bookworm-slim already has (Priority: required packages and apt's own closure,
# e.g. libc6, libstdc++6), counted by Debian's Installed-Size, and (b) the stripped cinfer binary. The base layer itself is reported
# separately (BASE_MB, the uncompressed size of debian:12-slim, ~75 MB for 12.x amd64).
# An estimate: apt's lists and docs are deleted in the image; Installed-Size counts them.
set -euo pipefail
cd "$(dirname "$0")/../.."
BASE_MB=${BASE_MB:-75}
pkgs=$(awk '/^FROM .* AS runtime/{r=1} r && /apt-get install/{f=1; next} f && /&&/{exit} f{print}' \
         deploy/docker/Dockerfile.cpu | tr -d '\\' | xargs)
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances $pkgs | grep -E '^[a-z0-9]' | sort -u)
deps() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" | grep -E '^[a-z0-9]' | sort -u
}
base=" $(deps apt | xargs) "
total_kib=0
added=()
for p in $closure; do
  prio=$(apt-cache show --no-all-versions "$p" 2>/dev/null | awk -F': ' '/^Priority:/{print $2; exit}')
  [ "$prio" = required ] && continue
  case "$base" in *" $p "*) continue ;; esac
  size=$(apt-cache show --no-all-versions "$p" 2>/dev/null | awk -F': ' '/^Installed-Size:/{print $2; exit}')
  [ -n "$size" ] || continue
  total_kib=$((total_kib + size))
  added+=("$p:$((size / 1024))MiB")
done
bin=${1:-build/src/cli/cinfer}
bin_kib=0
if [ -x "$bin" ]; then
  tmp=$(mktemp); strip -o "$tmp" "$bin"; bin_kib=$(( $(stat -c %s "$tmp") / 1024 )); rm -f "$tmp"
fi
echo "runtime packages: $pkgs"
echo "added packages (closure minus what the slim base has): ${added[*]}"
echo "added by packages: $((total_kib / 1024)) MiB; cinfer binary (stripped): ${bin_kib} KiB"
echo "estimated image: ~$((BASE_MB + total_kib / 1024 + bin_kib / 1024)) MiB uncompressed (base ${BASE_MB} MiB)"
