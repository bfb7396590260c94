#!/usr/bin/env bash
# bench_batched_vs_llamacpp.sh: the two engines alone (no HTTP), N sequences decoded together:
# `cinfer generate --parallel N` against llama.cpp's `llama-batched-bench -npl N`, same GGUF,
# same thread count, same prompt length (tokens) and output length, in alternating rounds so
# both see the same machine load. Prints per round the aggregate output tokens/s of each
# (N x gen / (prefill + decode time)), prefill and decode rates, and the ratio; then the
# median ratio. Both time the whole batch: prefill of the N prompts, then the decode steps.
# The prefill yields each sequence's first token, so the aggregate counts GEN - 1 decode
# steps for both (llama-batched-bench runs GEN decode steps after its prefill; its decode
# time is scaled by (GEN - 1) / GEN).
#
# Usage: bench/llm/bench_batched_vs_llamacpp.sh [-n N] [-g GEN] [-t THREADS] [-r ROUNDS] [MODEL.gguf]
#   defaults: N 16, GEN 32, THREADS 2, ROUNDS 5, MODEL from scripts/find_smollm2.sh
# Needs build/src/cli/cinfer and build/llama.cpp/bin/llama-batched-bench
# (bench/llm/build_llama_server.sh builds it; LLAMA_BATCHED_BENCH=path for another; LLAMA_ARGS=--no-repack
# where llama.cpp's weight repacking crashes, as on this AMX CPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=16 GEN=32 T=2 R=5
while getopts n:g:t:r: o; do
  case $o in n) N=$OPTARG ;; g) GEN=$OPTARG ;; t) T=$OPTARG ;; r) R=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
M=${1:-$(scripts/find_smollm2.sh)}
CINFER=${CINFER:-build/src/cli/cinfer}
LLAMA=${LLAMA_BATCHED_BENCH:-build/llama.cpp/bin/llama-batched-bench}
# more llama.cpp arguments; --no-repack where its CPU weight repacking crashes (this AMX CPU)
LLAMA_ARGS=${LLAMA_ARGS:-}
[ -x "$LLAMA" ] || { echo "$LLAMA not found: run bench/llm/build_llama_server.sh" >&2; exit 1; }
PROMPT="Please write a long story about a dragon who lives in a castle near the sea, and the knight who comes to visit him every spring."
NP=$("$CINFER" generate -m "$M" -p "$PROMPT" --tokenize 2>/dev/null | wc -w)
echo "model $(basename "$M"), $N sequences x ($NP prompt + $GEN output tokens), $T threads, $R rounds; load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-6s %-9s %12s %12s %12s %8s\n' round engine "out tok/s" "prefill t/s" "decode t/s" ratio
ratios=()
for r in $(seq "$R"); do
  # cinfer: aggregate from its own line; prefill = N*NP / TTFT of the batch; decode by difference
  out=$("$CINFER" generate -m "$M" -p "$PROMPT" -n "$GEN" -t "$T" --parallel "$N" 2>&1 >/dev/null)
  c_tot=$(echo "$out" | sed -n 's/.*output tokens in \([0-9.]*\) s.*/\1/p')
  c_ttft=$(echo "$out" | sed -n 's/.*TTFT \([0-9.]*\) s.*/\1/p' | head -1)
  # llama.cpp: the table row | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
  row=$("$LLAMA" -m "$M" -c $((N * (NP + GEN) + 64)) -b 2048 -ub 512 -npp "$NP" -ntg "$GEN" -npl "$N" \
        -t "$T" -tb "$T" $LLAMA_ARGS 2>/dev/null | grep -E "^\|\s+$NP\s+\|")
  l_pp=$(echo "$row" | awk -F'|' '{print $6}'); l_tg=$(echo "$row" | awk -F'|' '{print $8}')
  read -r c_out c_pp c_dec l_out l_ppr l_dec ratio < <(awk -v n="$N" -v np="$NP" -v g="$GEN" -v ct="$c_tot" \
    -v cf="$c_ttft" -v lp="$l_pp" -v lt="$l_tg" 'BEGIN {
      co = n * g / ct; lo = n * g / (lp + lt * (g - 1) / g);
      printf "%.1f %.1f %.1f %.1f %.1f %.1f %.2f\n", co, n * np / cf, n * (g - 1) / (ct - cf), lo, n * np / lp, n * g / lt, co / lo }')
  printf '%-6s %-9s %12s %12s %12s %8s\n' "$r" cinfer "$c_out" "$c_pp" "$c_dec" ""
  printf '%-6s %-9s %12s %12s %12s %8s\n' "$r" llama.cpp "$l_out" "$l_ppr" "$l_dec" "${ratio}x"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "median ratio (output tok/s, cinfer / llama.cpp): %.2fx  [min %.2f, max %.2f]; load %s\n", (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2), a[1], a[NR], "'"$(cut -d' ' -f1 /proc/loadavg)"'"}'
