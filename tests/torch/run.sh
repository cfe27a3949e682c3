#!/usr/bin/env bash
# Compare tensorframe with PyTorch: generate.py writes inputs and PyTorch's
# outputs as .npy, torch_compare checks ours on every device. PyTorch is
# installed if missing (Debian's python3-torch); the test is skipped (exit
# 77) only when it cannot be.
set -uo pipefail
compare=$1
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3
has_torch() { "$python" -c "import torch, numpy" > /dev/null 2>&1; }
if ! has_torch; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get > /dev/null; then
    echo "installing python3-torch and python3-numpy from Debian"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch python3-numpy > /dev/null 2>&1 \
      || { apt-get update -qq > /dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           python3-torch python3-numpy > /dev/null 2>&1; }
  fi
fi
if ! has_torch; then
  echo "SKIPPED: PyTorch could not be installed (need root and Debian's python3-torch, or 'pip install torch numpy')"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$python" "$here/generate.py" "$dir" ${TF_TEST_SEED:-} || exit 1
"$compare" "$dir"
