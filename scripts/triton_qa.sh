#!/bin/bash
# The census of Triton's own client examples and L0 QA tests against cinfer (issue 19):
#
#   scripts/triton_qa.sh SERVER_GIT CLIENT_GIT [CINFER_BIN] [PYTHON] [--only SUITE,...] [--keep]
#
# SERVER_GIT, CLIENT_GIT: git directories of github.com/triton-inference-server/server and
# /client (e.g. the bare mirrors `fetch` writes under /work/.mirror). Nothing of Triton's is
# copied into this repository: scripts/triton_qa.py takes the files into a scratch folder,
# builds the models there and starts the real binary per suite or per case. The tests
# hard-code 127.0.0.1:8000/8001, so the whole census runs in its own network namespace
# (unshare -n, needs root); without one it uses the machine's ports 8000 and 8001.
# Suites: examples http shm logtrace ensembles parameters string_io lifecycle.
set -euo pipefail
SG=$(realpath "$1"); CG=$(realpath "$2"); shift 2
BIN=build/src/cli/cinfer; PY=build/venv/bin/python
if [ $# -gt 0 ] && [[ $1 != --* ]]; then BIN=$1; shift; fi
if [ $# -gt 0 ] && [[ $1 != --* ]]; then PY=$1; shift; fi
[ -x "$PY" ] || PY=$(command -v python3)
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")  # absolute, not resolved (a venv)
BIN=$(realpath "$BIN")
HERE=$(dirname "$(realpath "$0")")
if unshare -n true 2>/dev/null; then
  exec unshare -n bash -c 'ip link set lo up && exec "$@"' _ "$PY" "$HERE/triton_qa.py" "$SG" "$CG" "$BIN" "$PY" "$@"
fi
exec "$PY" "$HERE/triton_qa.py" "$SG" "$CG" "$BIN" "$PY" "$@"
