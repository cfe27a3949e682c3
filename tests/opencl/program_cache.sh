#!/usr/bin/env bash
# The second process to use opencl:0 must not rebuild programs. PoCL's own
# kernel cache is switched off so the figures show tensorframe's cache.
set -euo pipefail
first_op=$1
export TF_CACHE_DIR=$(mktemp -d)
export POCL_KERNEL_CACHE=0
trap 'rm -rf "$TF_CACHE_DIR"' EXIT
cold=$("$first_op")
warm=$("$first_op")
echo "without cache: $cold"
echo "with cache:    $warm"
grep -q "built from source: 1, loaded from cache: 0" <<< "$cold"
grep -q "built from source: 0, loaded from cache: 1" <<< "$warm"
