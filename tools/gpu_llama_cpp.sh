#!/usr/bin/env bash
# The llama.cpp engine on an NVIDIA GPU against llama.cpp's own llama-server, one run, one model.
#
#   bash tools/gpu_llama_cpp.sh [F16_GGUF]    (from the repository root, on the GPU machine)
#
# For a machine with CUDA's compiler, cmake and ninja but no network (docs/operations.md, "GPUs"):
# it expects the project's wheels and their missing dependencies (for Python 3.12) in .whl/, llama.cpp's source (the
# llama-cpp-python version's vendor/llama.cpp) as .gpu/llama.cpp.tar.xz and a tokenizer dump from
# `python -m tools.random_gguf dump-tokenizer` as .gpu/tokenizer.json. It builds llama.cpp for the
# GPU's architecture (shared libraries for the binding, llama-server and llama-quantize, one build),
# makes a random-weight model of Llama-3-8B's shape in F16 (tools/random_gguf.py) unless a GGUF is
# given, quantizes it to Q4_0, imports each with `skulk model add` and runs `tools.bench_throughput
# --engine llama_cpp` on each (1, 8 and 32 concurrent streams, 128 new tokens). Everything it writes
# goes under $WORK (default /tmp/gpuw); figures and logs under $OUT (the device tool's folder) or
# $WORK/out, the nodes' logs as nodes.tar.xz there, and $WORK/done at the end. Before the benchmark,
# `tools/gpu_llama_smoke.py` loads the Q4_0 file on the GPU in one process per variant of a runner's
# start (smoke.log): where the node's runner dies, that says which part of its start llama.cpp does
# not survive. `bash tools/gpu_prepare.sh` (here, with network to the package index) fills .whl/ and .gpu/:
# the node runs from the wheel built there, so prepare again after changing the code.
# Each benchmark is stopped at the end of the script's $BUDGET_S (default 560) seconds, and the F16
# one is skipped when less than $F16_NEEDS_S (default 150) of them remain.
set -u -o pipefail
WORK=${WORK:-/tmp/gpuw}
OUTDIR=${OUT:-$WORK/out}
BUDGET_S=${BUDGET_S:-560}
F16_NEEDS_S=${F16_NEEDS_S:-150}
left() { echo $(( BUDGET_S - $(date +%s) + T0 )); }
T0=$(date +%s)
mkdir -p "$WORK" "$OUTDIR"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONFAULTHANDLER=1
step() { echo "== $(date +%T) +$(( $(date +%s) - T0 ))s $*"; }
finish() {
  (cd /tmp && ls -d skulk-bench-tp-* >/dev/null 2>&1 \
    && find skulk-bench-tp-* -name '*.log' -size -20M -print0 | tar cJf "$OUTDIR/nodes.tar.xz" --null -T - 2>/dev/null)
  touch "$WORK/done"; exit "$1"
}

F16_SRC=${1:+$(realpath "$1")}
step "install"
rm -rf "$WORK/tools" && cp -r tools "$WORK/tools"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl \
  || finish 1
tar xJf .gpu/llama.cpp.tar.xz -C "$WORK" || finish 1
cp .gpu/tokenizer.json "$WORK/"
export PYTHONPATH=$WORK/site:$WORK/llama.cpp/gguf-py
cd "$WORK" || finish 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "nvcc: $(command -v nvcc)"; nvcc --version | tail -1
echo "cores $(nproc), $(free -g | awk '/Mem/ {print $2}') GiB RAM"; df -h "$WORK" | tail -1

step "configure llama.cpp for CUDA"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
cmake -S llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" \
  -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_CUDA_NCCL=OFF > "$OUTDIR/cmake.log" 2>&1 || { tail -40 "$OUTDIR/cmake.log"; finish 1; }
step "build (beside it: the model)"
start=$(date +%s)
cmake --build build --target llama-server llama-quantize llama -j "$(nproc)" > "$OUTDIR/build.log" 2>&1 &
BUILD=$!
if [ -n "$F16_SRC" ]; then cp "$F16_SRC" f16.gguf; else python3 -m tools.random_gguf make tokenizer.json f16.gguf || finish 1; fi
wait $BUILD || { tail -40 "$OUTDIR/build.log"; finish 1; }
step "built in $(( $(date +%s) - start )) s"

BIN=$WORK/build/bin
VERSION=$(python3 -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))")
mkdir -p "$WORK/cache/skulk/llama-server/$VERSION"
ln -sf "$BIN/llama-server" "$WORK/cache/skulk/llama-server/$VERSION/llama-server"
export XDG_CACHE_HOME=$WORK/cache LLAMA_CPP_LIB_PATH=$BIN
python3 -c "import llama_cpp; print('binding offloads to the GPU:', bool(llama_cpp.llama_supports_gpu_offload()))"
step "quantize Q4_0"
"$BIN/llama-quantize" f16.gguf q4_0.gguf Q4_0 "$(nproc)" > "$OUTDIR/quantize.log" 2>&1 || { tail "$OUTDIR/quantize.log"; finish 1; }

step "import q4_0"
[ -d home/models/local--q4_0 ] || python3 -m skulk.scripts.cli model add q4_0.gguf --home home || finish 1
step "which part of a runner's start llama.cpp survives on the GPU (smoke.log)"
for v in binding ours torch standby runner fork engine; do
  [ "$(left)" -gt 200 ] || { step "smoke stopped: $(left) s left"; break; }
  timeout 60 python3 -m tools.gpu_llama_smoke "$v" home/models/local--q4_0 2>&1 | grep -v '^llama_\|^load\|^print_info' | tail -25 >> "$OUTDIR/smoke.log"
  echo "exit ${PIPESTATUS[0]} ($v)" | tee -a "$OUTDIR/smoke.log"
done

status=0
for q in q4_0 f16; do
  if [ "$q" = f16 ] && [ "$(left)" -lt "$F16_NEEDS_S" ]; then
    step "f16 skipped: $(left) s left of $BUDGET_S"; continue
  fi
  step "import $q"
  [ -d home/models/local--"$q" ] || python3 -m skulk.scripts.cli model add "$q.gguf" --home home || finish 1
  dir=$(ls -d home/models/*--"$q")
  step "bench $q"
  if [ "$(left)" -gt 30 ]; then
    timeout -k 5 "$(left)" python3 -m tools.bench_throughput --engine llama_cpp --model-dir "$dir" \
      --concurrency 1,8,32 --tokens 128 --max-batch 32 --prefill-chunk 2048 2>&1 | tee "$OUTDIR/bench-$q.log" || status=1
  else
    step "bench $q skipped: $(left) s left"
  fi
  rm -rf "$dir"
done
step "done (status $status)"
finish $status
