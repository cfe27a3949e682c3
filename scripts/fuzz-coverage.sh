#!/usr/bin/env bash
# Line and branch coverage of src/model's loader and tokenizer by the
# model fuzzer's corpus: fuzz_model rebuilt with clang's source-based
# coverage (no sanitizers), run once over every input the fuzzer kept and
# its seeds, then llvm-cov's report for model.c and tokenizer.c. Run after
# `make test` or `make fuzz` (they leave the corpus in FUZZ_BUILD).
# usage: scripts/fuzz-coverage.sh [FUZZ_BUILD (build-fuzz)] [OUT (build-fuzz-cov)]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
fuzz=$(realpath "${1:-build-fuzz}")
out=${2:-build-fuzz-cov}
flags="-fprofile-instr-generate -fcoverage-mapping"
CC=clang cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTF_FUZZ=ON -DTF_CUDA=OFF -DTF_ROCM=OFF \
  -DTF_WEBGPU=OFF -DTF_BUILD_TESTS=OFF -DTF_BUILD_EXAMPLES=OFF -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fprofile-instr-generate" > "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
cmake --build "$out" -j"$(nproc)" --target fuzz_model >> "$out.log" 2>&1 || { cat "$out.log"; exit 1; }
rm -f "$out"/*.profraw
export ASAN_OPTIONS="detect_leaks=0"
LLVM_PROFILE_FILE="$out/model-%p.profraw" "$out/bin/fuzz_model" -runs=0 "$fuzz/corpus-model" "$fuzz/seeds-model" \
  > "$out/run.log" 2>&1 || { tail -20 "$out/run.log"; exit 1; }
llvm-profdata merge -sparse "$out"/*.profraw -o "$out/model.profdata"
echo "fuzz-coverage: $(ls "$fuzz/corpus-model" | wc -l) inputs kept by the fuzzer, $(ls "$fuzz/seeds-model" | wc -l) seeds"
llvm-cov report "$out/bin/fuzz_model" -instr-profile="$out/model.profdata" \
  "$src/src/model/llm_model.c" "$src/src/model/llm_forward.c" "$src/src/model/tokenizer.c" "$src/src/formats/gguf.c"
