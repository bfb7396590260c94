#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer harnesses with clang (ASan+UBSan) and runs each for a short
# time (CI) or longer by hand. Usage: scripts/fuzz.sh [SECONDS_PER_HARNESS] [HARNESS...]
# Findings (crash-*, leak-*, timeout-*) are written to build-fuzz/findings/ and fail the run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}; shift || true
B=build-fuzz
CC=clang CXX=clang++ cmake -S . -B $B -DCINFER_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build $B -j"$(nproc)" --target all >/dev/null
mkdir -p $B/findings
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  mapfile -t harnesses < <(find $B/fuzz -maxdepth 1 -type f -name 'fuzz_*' -executable -printf '%f\n' | sort)
fi
fail=0
for h in "${harnesses[@]}"; do
  name=${h#fuzz_}
  work=$B/corpus/$name; mkdir -p "$work"
  seeds=(); for s in fuzz/corpus/$name tests/data/configs; do
    [ -d "$s" ] && { [ "$name" = config ] || [ "$s" != tests/data/configs ]; } && seeds+=("$s"); done
  if [ "$name" = onnx_loader ] && [ -d /usr/share/libonnx-testdata/data/node ]; then
    mkdir -p $B/seeds/onnx_loader  # small real models from Debian's ONNX test data
    find /usr/share/libonnx-testdata/data/node -name model.onnx -size -8k -print0 |
      while IFS= read -r -d '' f; do cp "$f" "$B/seeds/onnx_loader/$(echo "$f" | md5sum | cut -c1-12).onnx"; done
    seeds+=("$B/seeds/onnx_loader")
  fi
  dict=(); [ -f fuzz/fuzz_$name.dict ] && dict=(-dict=fuzz/fuzz_$name.dict)
  echo "fuzz: $h for ${SECS}s"
  if ! CINFER_FUZZ_REPO=examples/model_repository \
       LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0" "$B/fuzz/$h" -max_total_time="$SECS" -max_len=16384 \
       -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$B/findings/$h-" -print_final_stats=1 \
       "${dict[@]}" "$work" "${seeds[@]}" > "$B/findings/$h.log" 2>&1; then
    echo "fuzz: $h FAILED"; tail -40 "$B/findings/$h.log"; fail=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$B/findings/$h.log" | tail -2
  fi
done
if [ $fail -eq 0 ]; then echo "fuzz: ${#harnesses[@]} passed, 0 failed"; else exit 1; fi
