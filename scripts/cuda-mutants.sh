#!/usr/bin/env bash
# Does the GPU conformance suite catch a bug in the CUDA plugin's own
# kernels? Builds a copy of the tree with one deliberate bug in each (sed
# below), runs the conformance ops that reach it on cuda:0, and passes only
# if every mutant is caught. For the GPU machine, after scripts/cuda-check.sh.
# usage: scripts/cuda-mutants.sh [OUT_DIR]
set -uo pipefail
out=${1:-${OUT:-/tmp/cuda-mutants}}
src=$(pwd)
tree=${MUTANT_TREE:-/tmp/tf-mutant}
mkdir -p "$out"
rm -rf "$tree" && mkdir -p "$tree"
tar -C "$src" --exclude='./build*' -cf - . | tar -C "$tree" -xf -

# name@file@from@to@the conformance ops to run@what a failing case's line must match[@environment]
# (the mutants share one build, so each must be caught by cases only it breaks;
# the environment picks the kernel where a device has two: TF_CUDA_FLASH)
mutants=(
  "softmax 1/(s+1e-3)@src/backends/cuda/fast_kernels.cu@inv = soft ? 1.0f / s : 1.0f@inv = soft ? 1.0f / (s + 1e-3f) : 1.0f@softmax@."
  "warp merge drops lanes 16..31@src/backends/cuda/fast_kernels.cu@for (int off = 16; off; off >>= 1) r_merge@for (int off = 8; off; off >>= 1) r_merge@sum max argmax@."
  "flash: causal mask one key late@src/backends/cuda/fast_kernels.cu@(a.causal \&\& j > a.q_off + i)) x = -INFINITY@(a.causal \&\& j > a.q_off + i + 1)) x = -INFINITY@sdpa@b?f16 case 5 causal@TF_CUDA_FLASH=mma"
  "hopper: causal mask one key late@src/backends/cuda/flash_hopper.cu@(a.causal \&\& j > a.q_off + i)) x = -INFINITY@(a.causal \&\& j > a.q_off + i + 1)) x = -INFINITY@sdpa@b?f16 case 5 causal@TF_CUDA_FLASH=hopper"
  "hopper: the output never rescaled@src/backends/cuda/flash_hopper.cu@scale_rows(o, scale_o);@/* mutant: no rescale */;@sdpa@b?f16 case [56]@TF_CUDA_FLASH=hopper"
  "decode: split sums weighted 1% high@src/backends/cuda/fast_kernels.cu@L += part\[s \* (D + 2) + 1\] \* w;@L += part[s * (D + 2) + 1] * w * 1.01f;@sdpa@b?f16 case [78] causal"
  "cuBLASLt: ReLU after the bias@src/backends/cuda/lt_gemm.c@epi = CUBLASLT_EPILOGUE_BIAS@epi = CUBLASLT_EPILOGUE_RELU_BIAS@gemm@case [678] "
)
for m in "${mutants[@]}"; do
  IFS='@' read -r name file from to ops must env <<< "$m"
  before=$(md5sum "$tree/$file")
  sed -i "s|$from|$to|" "$tree/$file"
  [ "$before" != "$(md5sum "$tree/$file")" ] || { echo "mutant '$name': the pattern did not match"; exit 1; }
done
[ -z "${MUTANTS_DRY:-}" ] || { (cd "$tree" && git diff --no-index --stat "$src/src" src || true); exit 0; }
cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DTF_TEST_CMOCKA=OFF \
  ${CUDA_ARCHS:+-DTF_CUDA_ARCHITECTURES=$CUDA_ARCHS} > "$out/mutant-cmake.log" 2>&1 || { tail -20 "$out/mutant-cmake.log"; exit 1; }
cmake --build "$tree/build" -j"$(nproc)" --target tensorframe-cuda conformance > "$out/mutant-build.log" 2>&1 \
  || { grep -E "error" -A3 "$out/mutant-build.log" | head -40; exit 1; }
fail=0
for m in "${mutants[@]}"; do
  IFS='@' read -r name file from to ops must env <<< "$m"
  args=()
  for op in $ops; do args+=(--op "$op"); done
  log="$out/mutant-$(echo "$name" | tr -c 'a-zA-Z0-9' '_').txt"
  env $env "$tree/build/bin/conformance" --device cuda:0 --no-fallback cuda "${args[@]}" > "$log" 2>&1
  failed=$(grep -E "^FAIL" "$log" | grep -cE "$must")
  if [ "$failed" -gt 0 ]; then echo "caught: $name ($failed failing cases, e.g. $(grep -E '^FAIL' "$log" | grep -m1 -E "$must" | cut -c1-140))"
  else echo "NOT CAUGHT: $name"; fail=1; fi
done
exit $fail
