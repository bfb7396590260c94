#!/bin/bash
# ab_cpu.sh MODEL THREADS ROUNDS BIN1 BIN2 ...: compare cinfer binaries on one vision model
# by CPU time per image, the figure a shared, loaded host does not inflate (waiting in the
# run queue is not CPU time); wall-clock p50 is printed too. Each round runs
# `BIN run --model M --test-data-dir M/test_data_set_0 --threads T --repeat $REP` (REP=20
# unless set; BATCH=N adds --batch N) with every binary in turn, so a slow period of the
# host hits all of them. Prints per binary the rounds' CPU ms per batch (sorted), their
# p50s, FAIL when an output missed its reference, and the load average at the end.
# MODELS=DIR overrides ../shared/models/vision. docs/benchmarks-onnx.md uses it.
set -u
m=$1; T=$2; R=$3; shift 3
M=${MODELS:-$(dirname "$0")/../../../shared/models/vision}/$m
for r in $(seq "$R"); do
  i=0
  for b in "$@"; do
    out=$("$b" run --model "$M/model.onnx" --test-data-dir "$M/test_data_set_0" --threads "$T" --repeat "${REP:-20}" \
          ${BATCH:+--batch "$BATCH"} 2>&1)
    echo "$i $(echo "$out" | grep -o 'p50 [0-9.]*' | head -1 | cut -d' ' -f2) $(echo "$out" | grep -o 'cpu [0-9.]*' | cut -d' ' -f2) $(echo "$out" | tail -1)"
    i=$((i + 1))
  done
done | sort -n -k1,1 -k3,3 |
  awk -v m="$m" -v T="$T" '{k = $1; c[k] = c[k] " " $3; p[k] = p[k] " " $2; if ($4 != "PASS") bad[k] = 1}
       END {for (k in c) printf "%s T%s bin%d cpu:%s | p50:%s %s\n", m, T, k, c[k], p[k], bad[k] ? "FAIL" : ""}' | sort
echo "  load: $(cut -d' ' -f1-3 /proc/loadavg)"
