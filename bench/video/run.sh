#!/usr/bin/env bash
# bench/video/run.sh: every figure of docs/benchmarks-video.md in one run, on one machine.
#   1. face_analytics on one video: cinfer streams (in-process) against the same pipeline
#      in Python + OpenCV + ONNX Runtime, frame by frame; frames/s, CPU seconds per frame,
#      and the results compared frame by frame (compare.py)
#   2. 8 streams: dynamic batching across streams against one frame at a time
#   3. --find-max at 25 fps, p99 <= 200 ms: detector only (face_detect_frames) and the full
#      pipeline (face_analytics_frames), with plots and the cost per 1,000 frames
#   4. seed 000's table with the real pipeline, CPU: no batching / dynamic batching /
#      3 and 6 replicas behind `cinfer gateway` (8 streams, unpaced: one frame in flight each)
# usage: bench/video/run.sh [OUT_DIR]   (BIN, PY, THREADS, FRAMES, DUR, COST override;
#        SECTIONS="2 3" runs only those sections, e.g. on a short idle window)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/src/cli/cinfer}
PY=${PY:-build/venv/bin/python}
OUT=${1:-build/bench-video}
THREADS=${THREADS:-2}
FRAMES=${FRAMES:-40}
DUR=${DUR:-15}
COST=${COST:-0.10}   # $/hour of the machine, for the cost per 1,000 frames
SECTIONS=${SECTIONS:-1 2 3 4}
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$OUT"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"
log "start $(date -u +%FT%TZ); $(nproc) CPUs; load average: $(cut -d' ' -f1-3 /proc/loadavg)"

video="$OUT/astronaut_pan_zoom.mp4"
ffmpeg -y -loglevel error -loop 1 -i ../shared/models/vision/astronaut.png \
  -vf "zoompan=z='1+0.25*on/100':x='(iw-iw/zoom)*0.4':y='(ih-ih/zoom)*0.2':d=100:s=512x512:fps=25,format=yuv420p" \
  -frames:v 100 -c:v libx264 -preset veryfast -g 25 "$video"

repo=examples/model_repository
# "one frame at a time": the same models without dynamic_batching (each request executes alone)
nobatch="$work/nobatch"
for m in retinaface_pre retinaface_mnet25_v2 retinaface_post crop_ssrnet crop_expression crop_embedding \
         ssrnet_age ssrnet_gender densenet_expression mobilefacenet_embedding decode_age decode_gender \
         decode_expression normalize_embedding face_analytics_frames ultraface_pre ultraface_rfb320 \
         ultraface_post face_detect_frames; do
  mkdir -p "$nobatch/$m"
  sed '/^dynamic_batching/d' "$repo/$m/config.pbtxt" > "$nobatch/$m/config.pbtxt"
  for v in "$repo/$m"/*; do  # versions, labels files: everything but the config
    [ "$(basename "$v")" = config.pbtxt ] || ln -s "$(realpath "$v")" "$nobatch/$m/$(basename "$v")"
  done
done

timed() { # timed NAME CMD...: wall and CPU seconds of CMD into $OUT/NAME.time
  local name=$1; shift
  /usr/bin/time -f "%e %U %S" -o "$OUT/$name.time" "$@"
}

# ---- 1. cinfer vs Python + OpenCV + ONNX Runtime --------------------------------------
if want 1; then
log "1. face_analytics, one video, $FRAMES frames, $THREADS threads each"
timed py "$PY" bench/video/opencv_ort_pipeline.py "$video" --frames "$FRAMES" --threads "$THREADS" \
  --jsonl "$OUT/py.jsonl" > "$OUT/py.json"
for k in 1 4; do
  timed cinfer_inflight$k "$BIN" streams --source "$video" --model face_analytics_frames \
    --model-repository "$repo" --threads "$THREADS" --fps max --max-inflight $k --frames "$FRAMES" \
    --jsonl "$OUT/cinfer_inflight$k.jsonl" --json "$OUT/cinfer_inflight$k.json" > "$OUT/cinfer_inflight$k.txt" 2>&1
done
{ "$PY" bench/video/compare.py "$OUT/py.jsonl" "$OUT/cinfer_inflight1.jsonl" || true; } | tee -a "$OUT/summary.txt"
for n in py cinfer_inflight1 cinfer_inflight4; do
  read -r wall usr sys < "$OUT/$n.time"
  echo "$n: $FRAMES frames in $wall s wall: $(echo "$FRAMES / $wall" | bc -l | cut -c1-6) frames/s;" \
       "CPU $(echo "($usr + $sys) / $FRAMES" | bc -l | cut -c1-6) s per frame (process start included)" \
    | tee -a "$OUT/summary.txt"
done

fi

# ---- 2. batching across streams at 8 streams ------------------------------------------
if want 2; then
log "2. 8 streams, unpaced, $DUR s: dynamic batching vs one frame at a time"
for model in face_detect_frames face_analytics_frames; do
  for r in batch nobatch; do
    rp=$repo; [ $r = nobatch ] && rp=$nobatch
    l0=$(cut -d' ' -f1 /proc/loadavg)
    timed "s8_${model}_$r" "$BIN" streams --source "$video" --streams 8 --model $model --model-repository "$rp" \
      --threads "$THREADS" --fps max --duration "$DUR" --warmup 2 --json "$OUT/s8_${model}_$r.json" \
      --quiet > /dev/null 2>&1 || true
    # CPU seconds (user + system) of the whole run, start and warm-up included
    # CPU per frame: over every frame sent (warm-up included, as the CPU seconds are)
    "$PY" -c "import json,sys; j=json.load(open(sys.argv[1])); t=j['total']; n=sum(x['sent'] for x in j['streams']); w,u,s=map(float,open(sys.argv[2]).read().split()); print(f\"$model $r: {t['fps_total']:.2f} frames/s, p50 {t['latency_p50_ms']:.0f} ms, p99 {t['latency_p99_ms']:.0f} ms, CPU {u+s:.1f} s in {w:.1f} s wall ({(u+s)/w:.2f} cores), {(u+s)/max(n,1)*1e3:.1f} ms CPU per frame ({n} sent), load {sys.argv[3]}-{sys.argv[4]}\")" \
      "$OUT/s8_${model}_$r.json" "$OUT/s8_${model}_$r.time" "$l0" "$(cut -d' ' -f1 /proc/loadavg)" 2>/dev/null \
      | tee -a "$OUT/summary.txt" || echo "$model $r: failed" | tee -a "$OUT/summary.txt"
  done
done

fi

# ---- 3. largest stream count at 25 fps, p99 <= 200 ms ---------------------------------
if want 3; then
log "3. --find-max at 25 fps, p99 <= 200 ms"
for model in face_detect_frames face_analytics_frames; do
  "$BIN" streams --source "$video" --model $model --model-repository "$repo" --threads "$THREADS" \
    --find-max --target-fps 25 --slo-p99 200 --duration 8 --max-streams 32 --cost-per-hour "$COST" \
    --json "$OUT/findmax_$model.json" --plot "$OUT/findmax_$model.svg" 2>/dev/null \
    | grep find-max | sed "s/^/$model: /" | tee -a "$OUT/summary.txt"
done

fi

# ---- 4. seed 000's table, CPU ----------------------------------------------------------
if want 4; then
log "4. seed 000 table: face_analytics_frames, 8 streams unpaced, $DUR s"
row() { # row LABEL URL_OR_REPO...
  local label=$1; shift
  "$BIN" streams --source "$video" --streams 8 --model face_analytics_frames "$@" --fps max \
    --duration "$DUR" --warmup 2 --json "$OUT/seed_$label.json" --quiet > /dev/null 2>&1 || true
  "$PY" -c "import json,sys; t=json.load(open(sys.argv[1]))['total']; print(f\"| {sys.argv[2]} | {t['latency_mean_ms']:.0f} | {t['latency_p99_ms']:.0f} | {t['fps_total']:.2f} |\")" \
    "$OUT/seed_$label.json" "$label" 2>/dev/null | tee -a "$OUT/summary.txt" || echo "| $label | failed | | |" | tee -a "$OUT/summary.txt"
}
echo "| deployment | mean latency (ms) | p99 latency (ms) | frames/s |" | tee -a "$OUT/summary.txt"
row no-batching --model-repository "$nobatch" --threads "$THREADS"
row dynamic-batching --model-repository "$repo" --threads "$THREADS"
port=18600
for n in 3 6; do
  ups=()
  for i in $(seq "$n"); do
    p=$((port + i))
    "$BIN" serve --model-repository "$repo" --host 127.0.0.1 --http-port $p --grpc-port off \
      --threads 1 --model-control-mode explicit --load-model face_analytics_frames \
      > "$work/serve$p.log" 2>&1 &
    pids+=($!)
    ups+=(--upstream 127.0.0.1:$p)
  done
  for i in $(seq "$n"); do
    for _ in $(seq 600); do curl -sf "127.0.0.1:$((port + i))/v2/health/ready" > /dev/null && break; sleep 0.1; done
  done
  gp=$((port + 50))
  "$BIN" gateway "${ups[@]}" --host 127.0.0.1 --port $gp > "$work/gw$n.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do curl -sf "127.0.0.1:$gp/v2/models/face_analytics_frames/ready" > /dev/null && break; sleep 0.1; done
  row "$n-replicas-gateway" --url http://127.0.0.1:$gp
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  port=$((port + 100))
done
fi
log "end $(date -u +%FT%TZ); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
