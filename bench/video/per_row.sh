#!/usr/bin/env bash
# bench/video/per_row.sh: the compute time per row of each ONNX step of a pipeline, batched or
# not, as docs/benchmarks-video.md section 2 reports it. Starts `cinfer serve` on REPO, runs
# 8 unpaced streams over HTTP for DUR seconds, then reads /metrics: the compute duration is
# observed once per execution, so its sum over the rows is the real cost per row (the
# per-request compute_infer of /v2/models/stats counts every request of a batch with the whole
# batch's duration, Triton's semantics).
# usage: bench/video/per_row.sh REPO [MODEL] [VIDEO]   (BIN, PY, THREADS, DUR, PORT override)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/src/cli/cinfer}
PY=${PY:-build/venv/bin/python}
REPO=$1
MODEL=${2:-face_analytics_frames}
VIDEO=${3:-build/bench-video/astronaut_pan_zoom.mp4}
PORT=${PORT:-18790}
"$BIN" serve --model-repository "$REPO" --host 127.0.0.1 --http-port "$PORT" --grpc-port off \
  --threads "${THREADS:-2}" --model-control-mode explicit --load-model "$MODEL" > /dev/null 2>&1 &
sp=$!
trap 'kill $sp 2>/dev/null || true' EXIT
for _ in $(seq 600); do curl -sf "127.0.0.1:$PORT/v2/health/ready" > /dev/null && break; sleep 0.1; done
l0=$(cut -d' ' -f1 /proc/loadavg)
out=$(mktemp)
"$BIN" streams --source "$VIDEO" --streams 8 --model "$MODEL" --url "http://127.0.0.1:$PORT" --fps max \
  --duration "${DUR:-10}" --warmup 1 --json "$out" --quiet > /dev/null 2>&1 || true
curl -s "127.0.0.1:$PORT/metrics" > "$out.metrics"
"$PY" - "$out" "$out.metrics" "$l0" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import collections, json, re, sys
t = json.load(open(sys.argv[1]))["total"]
print(f"{t['fps_total']:.2f} frames/s, p50 {t['latency_p50_ms']:.0f} ms, p99 {t['latency_p99_ms']:.0f} ms, "
      f"load {sys.argv[3]}-{sys.argv[4]}")
d = collections.defaultdict(dict)
pat = r'(cinfer_compute_duration_seconds_sum|cinfer_inference_count_total|cinfer_execution_count_total)' \
      r'\{model="([^"]+)"[^}]*\} ([0-9.e+-]+)'
for line in open(sys.argv[2]):
    m = re.match(pat, line)
    if m:
        d[m.group(2)][m.group(1)] = float(m.group(3))
for name, v in sorted(d.items()):
    n, e = v.get("cinfer_inference_count_total", 0), v.get("cinfer_execution_count_total", 0)
    if n and e and v.get("cinfer_compute_duration_seconds_sum", 0) * 1e3 / n >= 0.5:
        c = v["cinfer_compute_duration_seconds_sum"] * 1e3
        print(f"  {name:24s} rows {n:5.0f}  rows per execution {n / e:.2f}  compute per row {c / n:.1f} ms")
PY
rm -f "$out" "$out.metrics"
