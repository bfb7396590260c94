#!/usr/bin/env bash
# test.sh: set up, build and run the whole test suite (the README's test command).
#   CINFER_SANITIZE=1  build with AddressSanitizer + UndefinedBehaviorSanitizer
#   CINFER_WERROR=1    warnings are errors (CI)
#   BUILD_DIR          build folder (default: build, or build-asan with sanitizers)
set -euo pipefail
cd "$(dirname "$0")/.."
san=${CINFER_SANITIZE:-0}
BUILD_DIR=${BUILD_DIR:-$([ "$san" = 1 ] && echo build-asan || echo build)}
if [ "$san" = 1 ]; then  # third-party leaks we cannot fix are listed (and explained) there
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fi
scripts/setup.sh "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -DCINFER_SANITIZE=$([ "$san" = 1 ] && echo ON || echo OFF) \
      -DCINFER_WERROR=$([ "${CINFER_WERROR:-0}" = 1 ] && echo ON || echo OFF) >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
cd "$BUILD_DIR"
ctest --output-on-failure -j"$(nproc)" "$@"
