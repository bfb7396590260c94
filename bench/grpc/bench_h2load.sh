#!/usr/bin/env bash
# bench_h2load.sh: h2load (nghttp2-client), the HTTP/2 load generator, against the gRPC
# endpoint: unary identity ModelInfer calls (one framed ModelInferRequest, made with
# tritonclient's generated protobuf module) on C connections with M streams each. h2load
# counts a call as done by its HTTP status (always 200 in gRPC, even for an error status in
# the trailers), so the script also prints what the server counted as successful
# (cinfer_request_success_total): both must equal the requests sent. For comparison the
# same tensor goes to the KServe HTTP endpoint (binary tensor data, HTTP/1.1 keep-alive,
# h2load --h1) on C x M connections, one request in flight each. Usage:
#   bench/grpc/bench_h2load.sh [REQUESTS=50000] [CONNECTIONS=1] [STREAMS=16] [ELEMENTS=16]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-50000}; C=${2:-1}; M=${3:-16}; ELEMS=${4:-16}
BIN=${CINFER_BIN:-build/src/cli/cinfer}
VENV=${CINFER_VENV:-/work/main/build/venv}
command -v h2load >/dev/null || { echo "h2load not found: apt-get install nghttp2-client" >&2; exit 2; }
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
"$VENV/bin/python" - "$dir/msg" "$ELEMS" <<'PY'
import struct, sys
import numpy as np
from tritonclient.grpc import service_pb2
r = service_pb2.ModelInferRequest(model_name="identity")
t = r.inputs.add(name="INPUT0", datatype="FP32", shape=[1, int(sys.argv[2])])
r.raw_input_contents.append(np.arange(int(sys.argv[2]), dtype=np.float32).tobytes())
b = r.SerializeToString()
open(sys.argv[1], "wb").write(struct.pack(">BI", 0, len(b)) + b)
hdr = ('{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],'
       '"parameters":{"binary_data_size":%d}}],"outputs":[{"name":"OUTPUT0",'
       '"parameters":{"binary_data":true}}]}' % (int(sys.argv[2]), 4 * int(sys.argv[2]))).encode()
open(sys.argv[1] + ".http", "wb").write(hdr + np.arange(int(sys.argv[2]), dtype=np.float32).tobytes())
open(sys.argv[1] + ".hlen", "w").write(str(len(hdr)))
PY
"$BIN" serve --model-repository examples/model_repository --host 127.0.0.1 --http-port 0 \
  --grpc-port 0 --model-control-mode explicit --load-model identity >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 200); do grep -q "listening" "$dir/log" && break; sleep 0.05; done
http=$(grep -o 'http_port=[0-9]*' "$dir/log" | cut -d= -f2)
grpc=$(grep -o 'grpc_port=[0-9]*' "$dir/log" | cut -d= -f2)
count() { curl -s "127.0.0.1:$http/metrics" | awk '/^cinfer_request_success_total\{model="identity"/ {s+=$2} END {print s+0}'; }
n0=$(count)
h2load -n "$N" -c "$C" -m "$M" -d "$dir/msg" -H 'content-type: application/grpc' -H 'te: trailers' \
  "http://127.0.0.1:$grpc/inference.GRPCInferenceService/ModelInfer" | \
  grep -E '^(finished in|requests:|status codes:|time for request:)'
echo "gRPC: the server counted $(( $(count) - n0 )) successful identity requests of $N sent"
n0=$(count)
h2load --h1 -n "$N" -c $((C * M)) -m 1 -d "$dir/msg.http" -H 'content-type: application/octet-stream' \
  -H "inference-header-content-length: $(cat "$dir/msg.hlen")" \
  "http://127.0.0.1:$http/v2/models/identity/infer" | \
  grep -E '^(finished in|requests:|status codes:|time for request:)'
echo "HTTP: the server counted $(( $(count) - n0 )) successful identity requests of $N sent"
