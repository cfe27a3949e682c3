#!/usr/bin/env bash
# Build the libFuzzer targets for the file loaders with clang (ASan+UBSan)
# and run each for a bounded time over the checked-in seed corpus
# (tests/fuzz/corpus: files from the library's writers, NumPy and the
# GGUF test's builder). New
# inputs go to a scratch corpus under the build folder; a crash, a sanitizer
# report or a broken oracle (see tests/fuzz/fuzz_loader.c) fails the run and
# leaves the input that did it in that folder.
# usage: fuzz.sh <build dir> <seconds per target>
set -euo pipefail
build=$1 seconds=$2
src=$(cd "$(dirname "$0")/.." && pwd)
CC=clang cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTF_FUZZ=ON -DTF_CUDA=OFF \
  -DTF_BUILD_TESTS=OFF -DTF_BUILD_EXAMPLES=OFF > "$build.log" 2>&1 || { cat "$build.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target fuzz_npy fuzz_safetensors fuzz_gguf >> "$build.log" 2>&1 || { cat "$build.log"; exit 1; }
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1"
export LSAN_OPTIONS="suppressions=$src/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for kind in npy safetensors gguf; do
  work="$build/corpus-$kind"
  mkdir -p "$work" "$build/crashes-$kind"
  echo "fuzz_$kind: ${seconds}s over tests/fuzz/corpus/$kind ($(ls "$src/tests/fuzz/corpus/$kind" | wc -l) seeds)"
  "$build/bin/fuzz_$kind" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$build/crashes-$kind/" -print_final_stats=1 "$work" "$src/tests/fuzz/corpus/$kind" \
    > "$build/fuzz_$kind.log" 2>&1 || { tail -40 "$build/fuzz_$kind.log"; echo "fuzz_$kind FAILED"; exit 1; }
  grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$build/fuzz_$kind.log" | tail -2
done
echo "fuzz: 3 passed, 0 failed"
