#!/usr/bin/env bash
# build_llama_server.sh: builds llama.cpp's own HTTP server (`llama-server`, parallel slots,
# continuous batching) and `llama-batched-bench` (its engine alone: N parallel sequences, no
# HTTP) from the llama.cpp sources vendored in the llama-cpp-python sdist the project already
# pins (scripts/setup.sh), so the serving benchmarks compare against the same llama.cpp
# revision as the golden tests. Bench-only: not part of the build or CI.
#
# Idempotent: does nothing when both binaries exist in $OUT/bin. Usage:
#   bench/llm/build_llama_server.sh [OUT_DIR]        (default build/llama.cpp)
# Environment: LLAMA_CPP_SDIST=path/to/llama_cpp_python-0.3.36.tar.gz skips the download;
# JOBS (default 2: the development machine has 2 shared cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=0.3.36
OUT=${1:-build/llama.cpp}
JOBS=${JOBS:-2}
if [ -x "$OUT/bin/llama-server" ] && [ -x "$OUT/bin/llama-batched-bench" ]; then
  echo "build_llama_server: $OUT/bin/llama-server and llama-batched-bench already built"; exit 0
fi
mkdir -p "$OUT"
sdist=${LLAMA_CPP_SDIST:-$OUT/llama_cpp_python-$VERSION.tar.gz}
if [ ! -f "$sdist" ]; then
  PIP=build/venv/bin/pip; [ -x "$PIP" ] || PIP="python3 -m pip"
  $PIP download -q --disable-pip-version-check --no-binary :all: --no-deps \
    -d "$OUT" "llama-cpp-python==$VERSION"
  sdist=$OUT/llama_cpp_python-$VERSION.tar.gz
fi
src=$OUT/src
if [ ! -f "$src/CMakeLists.txt" ]; then
  rm -rf "$src" && mkdir -p "$src"
  tar xzf "$sdist" -C "$src" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
# Native CPU flags like llama-cpp-python's pip build (which the single-stream benchmark uses);
# no curl (no network), no tests/examples: only the two tools and their dependencies.
cmake -S "$src" -B "$OUT/cmake" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF >"$OUT/cmake.log"
cmake --build "$OUT/cmake" -j"$JOBS" --target llama-server llama-batched-bench >"$OUT/build.log"
mkdir -p "$OUT/bin"
cp "$OUT/cmake/bin/llama-server" "$OUT/cmake/bin/llama-batched-bench" "$OUT/bin/"
"$OUT/bin/llama-server" --version 2>&1 | tee "$OUT/VERSION"
