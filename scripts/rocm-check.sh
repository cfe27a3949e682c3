#!/usr/bin/env bash
# The ROCm/HIP plugin's checks. Nothing HIP has executed on this project's
# machines (no AMD GPU): this is what runs first on one.
#   1. build, with the compile time of each gfx target's code objects
#      (hipcc_timed.sh writes one .time file per code object);
#   2. tf-info: rocm:N with its target, compute units, wave size, memory;
#      stop here without a device (then step 1 is the whole check);
#   3. conformance on every device, failing if a ROCm device ran any op on the CPU;
#   4. GEMM both ways: matmul/gemm conformance through rocBLAS (where
#      installed) and again on the portable tiled kernel (TF_ROCBLAS_LIB
#      pointing nowhere), so the kernel is checked against the same float64
#      references rocBLAS is.
# usage: scripts/rocm-check.sh [OUT_DIR]       (BUILD, default build-rocm;
# TF_ROCM_TARGETS, e.g. gfx942 on an MI300 with a newer hipcc, narrows or
# changes the targets)
set -uo pipefail
out=${1:-/tmp/rocm-check}
build=${BUILD:-build-rocm}
mkdir -p "$out"
fail=0
step() { echo; echo "== $* =="; }

step build
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=OFF \
  ${TF_ROCM_TARGETS:+-DTF_ROCM_TARGETS=$TF_ROCM_TARGETS} > "$out/cmake.log" 2>&1 \
  || { tail -40 "$out/cmake.log"; exit 1; }
grep -q "building the ROCm plugin" "$out/cmake.log" || { grep "ROCm" "$out/cmake.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error|warning" -A3 "$out/build.log" | head -60; exit 1; }
if grep -E "warning:" "$out/build.log" | grep -q rocm; then echo "warnings in the ROCm build"; fail=1; fi

step "compile time per target (seconds, the 9 dtype programs one after another)"
cat "$build"/src/backends/rocm/co/*.time | awk '{t[$1] += $3; n[$1]++} END {for (k in t) printf "%-8s %6.1f s  (%d code objects)\n", k, t[k], n[k]}' \
  | sort | tee "$out/compile-times.txt"
ls -l "$build"/src/backends/rocm/co/*.hsaco | awk '{s += $5} END {printf "code objects: %.1f MiB in all\n", s / 1048576}'

step tf-info
"$build/bin/tf-info" | tee "$out/tf-info.txt"
if ! grep -q "rocm:0" "$out/tf-info.txt"; then
  echo "no rocm:0 on this machine: the build is the check (the tf-info line above says why)"
  exit $fail
fi

step "conformance, every device, no CPU fallback on ROCm"
timeout "${CONFORMANCE_TIMEOUT:-600}" "$build/bin/conformance" --no-fallback rocm > "$out/conformance.txt" 2>&1 \
  || { echo "conformance exited with status $?"; fail=1; }
grep -E "passed|fallback|^FAIL" "$out/conformance.txt" | head -40

step "GEMM: rocBLAS, then the portable tiled kernel"
for op in matmul gemm; do
  "$build/bin/conformance" --no-fallback rocm --device rocm:0 --op $op > "$out/$op-rocblas.txt" 2>&1 || fail=1
  TF_ROCBLAS_LIB=/nonexistent/librocblas.so "$build/bin/conformance" --no-fallback rocm --device rocm:0 --op $op \
    > "$out/$op-portable.txt" 2>&1 || fail=1
  tail -1 "$out/$op-rocblas.txt" "$out/$op-portable.txt"
done
exit $fail
