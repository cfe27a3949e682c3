#!/usr/bin/env bash
# scikit-learn's bundled 8x8 digits (sklearn/datasets/data/digits.csv.gz:
# 1797 images, UCI's optical digits) into BUILD/data, taken from the
# scikit-learn wheel on PyPI (downloaded once; nothing else of it is used
# or installed). Prints the file's path.
# usage: scripts/fetch-digits.sh BUILD PIP
set -euo pipefail
build=$(realpath "${1:?usage: fetch-digits.sh BUILD PIP}")
pip=${2:?usage: fetch-digits.sh BUILD PIP}
data=$build/data
out=$data/digits.csv.gz
if [ ! -s "$out" ]; then
  mkdir -p "$data/wheel"
  echo "fetch-digits: downloading the scikit-learn wheel from PyPI into $data/wheel" >&2
  "$pip" download -q --no-deps --only-binary=:all: scikit-learn -d "$data/wheel" >&2
  wheel=$(ls "$data"/wheel/scikit_learn-*.whl | head -n 1)
  /usr/bin/python3 - "$wheel" "$out" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    data = z.read("sklearn/datasets/data/digits.csv.gz")
with open(sys.argv[2] + ".part", "wb") as f:
    f.write(data)
PY
  mv "$out.part" "$out"
fi
echo "$out"
