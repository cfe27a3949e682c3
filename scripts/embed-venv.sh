#!/usr/bin/env bash
# The Python environment of the sentence-embedding reference and benchmark
# (tests/embed/make_fixtures.py, bench/embed_compare.py): a venv under the
# build folder that reuses Debian's python3-torch and numpy (pinned, so pip
# never pulls another torch or a numpy that torch was not built for) and adds
# sentence-transformers, onnxruntime (with onnx, for its transformer optimizer
# and dynamic quantization) and the model's tokenizer from PyPI.
# usage: scripts/embed-venv.sh BUILD_DIR      prints the venv's python
set -euo pipefail
venv=${1:?usage: embed-venv.sh BUILD_DIR}/embed-venv
py=$venv/bin/python
if ! [ -x "$py" ] || ! "$py" -c "import sentence_transformers, onnxruntime, onnx, tokenizers" 2> /dev/null; then
  /usr/bin/python3 -c "import torch, numpy" 2> /dev/null || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-torch python3-numpy python3-venv > /dev/null; }
  /usr/bin/python3 -m venv --help > /dev/null 2>&1 && /usr/bin/python3 -c "import ensurepip" 2> /dev/null || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-venv > /dev/null; }
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv" >&2
  pins=$venv/pins.txt
  /usr/bin/python3 -c 'import torch, numpy; print(f"torch=={torch.__version__}\nnumpy=={numpy.__version__}")' > "$pins"
  echo "embed-venv: installing sentence-transformers, onnxruntime and tokenizers into $venv" >&2
  "$py" -m pip install --quiet -c "$pins" onnxruntime onnx sentence-transformers==2.7.0 transformers==4.40.2 >&2
fi
echo "$py"
