#!/usr/bin/env bash
# serve.sh: set up, build, and run `cinfer serve` on the example model repository
# (the README's run command). Extra arguments go to `cinfer serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
cmake -S . -B build >/dev/null
cmake --build build -j"$(nproc)"
exec build/src/cli/cinfer serve --model-repository examples/model_repository "$@"
