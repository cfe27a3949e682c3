#!/usr/bin/env bash
# The CUDA checks that need a GPU, for a machine that has one and installs
# nothing (the device tool's machine: nvcc, CMake and PyTorch are there):
#   1. build (no cmocka there: the unit tests stay out; conformance stays in);
#   2. tf-info;
#   3. conformance on every device, failing if a CUDA device ran any op on the CPU;
#      then tests/cuda/test_cuda_gpu.c (the build has the test-only fault hook);
#   4. conformance on cuda:0 once under compute-sanitizer memcheck, and the
#      ops whose kernels share memory under racecheck;
#   5. the GPU suite beside PyTorch (bench/gpu_compare.py), if torch imports.
# usage: scripts/cuda-check.sh [OUT_DIR]     (logs and perf_gpu.json go there)
# MEMCHECK_TIMEOUT (default 540 s) and RACECHECK_TIMEOUT (300 s) bound step 4;
# CUDA_ARCHS (e.g. 90-real) narrows the build to save time on one GPU.
set -uo pipefail
out=${1:-${OUT:-/tmp/cuda-check}}
build=${BUILD:-build-gpu}
mkdir -p "$out"
fail=0
step() { echo; echo "== $* =="; }

step build
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTF_TEST_CMOCKA=OFF -DTF_CUDA_TEST_HOOKS=ON \
  ${CUDA_ARCHS:+-DTF_CUDA_ARCHITECTURES=$CUDA_ARCHS} > "$out/cmake.log" 2>&1 \
  || { tail -40 "$out/cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -60; exit 1; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
nvcc --version | tail -2

step tf-info
"$build/bin/tf-info" | tee "$out/tf-info.txt"
grep -q "cuda:0" "$out/tf-info.txt" || { echo "no cuda:0 on this machine"; exit 1; }

step "conformance, every device, no CPU fallback on CUDA"
timeout "${CONFORMANCE_TIMEOUT:-420}" "$build/bin/conformance" --no-fallback cuda > "$out/conformance.txt" 2>&1 \
  || { echo "conformance exited with status $?"; fail=1; }
grep -E "passed|fallback|^FAIL" "$out/conformance.txt" | head -40

step "transfers, OOM, stream order, sticky error (tests/cuda/test_cuda_gpu.c)"
timeout 300 "$build/bin/test_cuda_gpu" > "$out/cuda_gpu.txt" 2>&1 || fail=1
cat "$out/cuda_gpu.txt"

step "compute-sanitizer memcheck: conformance on cuda:0"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$sanitizer" ]; then
  timeout "${MEMCHECK_TIMEOUT:-540}" "$sanitizer" --tool memcheck --error-exitcode 3 "$build/bin/conformance" --device cuda:0 \
    > "$out/memcheck.txt" 2>&1 || fail=1
  tail -5 "$out/memcheck.txt"
else
  echo "compute-sanitizer not found" | tee "$out/memcheck.txt"
fi

step "compute-sanitizer racecheck: the kernels that share memory"
if [ -n "$sanitizer" ]; then
  ops=(--op softmax --op log_softmax --op rmsnorm --op layernorm --op sdpa --op sum --op max --op argmax --op cumsum)
  timeout "${RACECHECK_TIMEOUT:-300}" "$sanitizer" --tool racecheck --racecheck-report all --error-exitcode 3 \
    "$build/bin/conformance" --device cuda:0 "${ops[@]}" > "$out/racecheck.txt" 2>&1 || fail=1
  tail -4 "$out/racecheck.txt"
fi

step "GPU suite beside PyTorch"
if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
  python3 bench/gpu_compare.py "$build" --device cuda:0 --out "$out" 2>&1 | tee "$out/gpu_compare.txt"
else
  echo "PyTorch with CUDA not importable: no comparison"
fi
exit $fail
