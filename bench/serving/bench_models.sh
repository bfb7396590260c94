#!/usr/bin/env bash
# bench_models.sh: real models served on this CPU, measured with `cinfer bench` (issue 6):
#  (b) retinaface_mnet25_v2 (640x640) with and without dynamic batching: throughput and
#      p50/p99 against closed-loop concurrency;
#  (c) SmolLM2-135M-Instruct through the OpenAI API, streamed: TTFT, inter-token latency,
#      output tokens/s against concurrency, with the cost per 1M tokens at PRICE_PER_HOUR.
# Writes docs/benchmarks-serving.md and SVG plots in docs/plots/.
# Usage: bench/serving/bench_models.sh [--quick]   env: PRICE_PER_HOUR (default 0.10 USD,
#        the hourly price assumed for the 2 vCPUs this runs on), THREADS (server budget)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${CINFER_BIN:-build/src/cli/cinfer}
QUICK=${1:-}
PRICE=${PRICE_PER_HOUR:-0.10}
WIN=2000; WINS=6; CONC_V="1,2,4,8"; CONC_L="1,4,16"
if [ "$QUICK" = --quick ]; then WIN=1000; WINS=4; CONC_V="1,4,8"; CONC_L="1,4"; fi
work=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
vision=$(cd ../shared/models/vision && pwd)
for v in batch nobatch; do
  d=$work/repo/retinaface_$v; mkdir -p $d/1; ln -s $vision/retinaface_mnet25_v2/model.onnx $d/1/model.onnx
  { echo "backend: \"onnxruntime\""; echo "max_batch_size: 8"
    [ $v = batch ] && echo "dynamic_batching { max_queue_delay_microseconds: 5000 }"; true; } > $d/config.pbtxt
done
mkdir -p $work/repo/smollm2/1
cp examples/model_repository/smollm2/config.pbtxt $work/repo/smollm2/
ln -s "$(readlink -f examples/model_repository/smollm2/1/model.gguf)" $work/repo/smollm2/1/model.gguf
port=$((30000 + RANDOM % 10000))
"$BIN" serve --model-repository $work/repo --host 127.0.0.1 --http-port $port ${THREADS:+--threads $THREADS} \
  > $work/serve.log 2>&1 &
for _ in $(seq 300); do curl -sf localhost:$port/v2/health/ready >/dev/null && break; sleep 0.1; done
url=http://127.0.0.1:$port
common=(--warmup-ms 1000 --window-ms $WIN --max-windows $WINS --stability 15)
mkdir -p docs/plots
for v in nobatch batch; do
  "$BIN" bench --url $url --model retinaface_$v --binary --shape data:1,3,640,640 \
    --concurrency $CONC_V "${common[@]}" --cost-per-hour $PRICE \
    --json $work/rf_$v.json --plot docs/plots/serving-retinaface-$v.svg | tee $work/rf_$v.txt
done
# a streamed request lasts seconds here: longer windows, so each holds many completions
"$BIN" bench --url $url --openai chat --model smollm2 --max-tokens 32 --prompt-len 64 --stream \
  --concurrency $CONC_L --warmup-ms 2000 --window-ms $((WIN * 4)) --max-windows 3 --stability 25 \
  --cost-per-hour $PRICE \
  --json $work/llm.json --plot docs/plots/serving-smollm2.svg | tee $work/llm.txt
python3 - "$work" "$PRICE" "$QUICK" <<'PY'
import json, sys, time, platform
work, price, quick = sys.argv[1], float(sys.argv[2]), sys.argv[3]
out = open("docs/benchmarks-serving.md", "w")
w = out.write
w("# Real models served on CPU (`cinfer bench`)\n\n")
w(f"Command: `bench/serving/bench_models.sh {quick}` ({time.strftime('%Y-%m-%d')}, 2 shared vCPUs, "
  f"priced at {price} USD/hour). Closed loop; latencies are client-side.\n\n")
w("## retinaface_mnet25_v2, 640x640, with and without dynamic batching\n\n")
w("| dynamic batching | concurrency | infer/s | p50 ms | p99 ms | USD per 1k inferences |\n|---|---|---|---|---|---|\n")
for v, label in (("nobatch", "no"), ("batch", "yes (max delay 5 ms)")):
    for l in json.load(open(f"{work}/rf_{v}.json"))["levels"]:
        lat = l["latency"]
        cost = price / 3600 / l["throughput_rps"] * 1000 if l["throughput_rps"] else float("nan")
        w(f"| {label} | {l['concurrency']} | {l['throughput_rps']:.2f} | {lat['p50_us']/1e3:.1f} | {lat['p99_us']/1e3:.1f} | {cost:.5f} |\n")
w("\n![no batching](plots/serving-retinaface-nobatch.svg) ![batching](plots/serving-retinaface-batch.svg)\n\n")
w("## SmolLM2-135M-Instruct Q4_1, OpenAI chat, streamed, 64 prompt / 32 output tokens\n\n")
w("| concurrency | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | USD per 1M output tokens |\n|---|---|---|---|---|---|---|---|\n")
for l in json.load(open(f"{work}/llm.json"))["levels"]:
    o = l.get("openai", l)
    def g(k, sub):
        v = o.get(k) or {}
        return v.get(sub, float("nan")) / 1e3 if isinstance(v, dict) else float("nan")
    tps = o.get("output_tokens_per_s", float("nan"))
    cost = price / 3600 / tps * 1e6 if tps and tps == tps else float("nan")
    w(f"| {l['concurrency']} | {l['throughput_rps']:.2f} | {tps:.1f} | {g('ttft','p50_us'):.1f} | {g('ttft','p99_us'):.1f} | "
      f"{g('itl','p50_us'):.1f} | {g('itl','p99_us'):.1f} | {cost:.3f} |\n")
w("\n![smollm2](plots/serving-smollm2.svg)\n")
print("wrote docs/benchmarks-serving.md")
PY
