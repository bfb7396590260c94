#!/bin/bash
# healthcheck.sh PORT PATH: exit 0 when GET http://127.0.0.1:PORT/PATH answers 200.
# Used by the images' HEALTHCHECK; written for bash's /dev/tcp so the runtime image needs
# neither curl nor wget. Docker's --timeout (or the probe's) bounds how long it may take.
set -eu
port=${1:?port}
path=${2:?path}
exec 3<>"/dev/tcp/127.0.0.1/${port}"
printf 'GET %s HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n' "$path" >&3
IFS= read -r status <&3
exec 3<&-
case "$status" in
  "HTTP/1."[01]" 200"*) exit 0 ;;
  *) echo "healthcheck: ${path} answered: ${status}" >&2; exit 1 ;;
esac
