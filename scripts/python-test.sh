#!/usr/bin/env bash
# The Python package's tests (python/tests) against the installed package,
# in two venvs under BUILD/py made from Debian's python3:
#   np2     NumPy >= 2.1 (DLPack 1.x capsules) and array-api-strict, from PyPI
#   debian  Debian's NumPy 1.24 and PyTorch 1.13 (DLPack 0.x capsules)
# Both install the wheel `pip wheel ./python` builds; its CMake build stays
# in BUILD/py/cmake, so a second run rebuilds only what changed. Modules and
# devices a run needs are required (TF_PYTEST_REQUIRE, TF_PYTEST_DEVICES):
# a missing one fails the run rather than skipping its tests.
# usage: scripts/python-test.sh BUILD
set -euo pipefail
build=$(realpath "${1:?usage: python-test.sh BUILD}")
root=$(cd "$(dirname "$0")/.." && pwd)
py=$build/py
mkdir -p "$py"
[ -x "$py/np2/bin/python" ] || /usr/bin/python3 -m venv "$py/np2"
[ -x "$py/debian/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$py/debian"
"$py/np2/bin/pip" install -q "numpy>=2.1" "array-api-strict>=2.0" pytest
"$py/debian/bin/pip" install -q pytest

echo "python-test: building the wheel (pip wheel ./python)"
rm -rf "$py/wheel"
"$py/np2/bin/pip" wheel -q "$root/python" -w "$py/wheel" --config-settings=build-dir="$py/cmake" > "$py/wheel.log" 2>&1 \
  || { cat "$py/wheel.log"; exit 1; }
for v in np2 debian; do
  "$py/$v/bin/pip" install -q --force-reinstall --no-deps "$py"/wheel/tensorframe-*.whl
done

devices=cpu,opencl:0
[ -f "$py/cmake/lib/libtensorframe-webgpu.so" ] && devices=$devices,webgpu:0
cd "$root/python/tests"
echo "python-test: the quick start's line"
"$py/np2/bin/python" -c "import tensorframe as tf; print(tf.ones((2,3), device='opencl:0') + 1)"
echo "python-test: the C layer (python/csrc/native.c) is what the wheel runs on"
"$py/np2/bin/python" -c "import tensorframe._lib as l; assert l.native, 'libtfpy_native.so did not load'"
echo "python-test: NumPy 2 and array-api-strict (devices $devices)"
TF_PYTEST_REQUIRE=numpy,array_api_strict TF_PYTEST_DEVICES=$devices TF_PYTEST_MODELS=$build/models \
  "$py/np2/bin/python" -m pytest -q -p no:cacheprovider -rs .
echo "python-test: the same on ctypes alone (TENSORFRAME_NATIVE=0: the general path the C layer hands over to)"
TENSORFRAME_NATIVE=0 TF_PYTEST_REQUIRE=numpy,array_api_strict TF_PYTEST_DEVICES=$devices \
  TF_PYTEST_MODELS=$build/models "$py/np2/bin/python" -m pytest -q -p no:cacheprovider .
digits=$(bash "$root/scripts/fetch-digits.sh" "$build" "$py/debian/bin/pip")
echo "python-test: Debian's NumPy 1.24 and PyTorch 1.13 (autograd and training against torch on $devices)"
TF_PYTEST_REQUIRE=numpy,torch TF_PYTEST_DEVICES=$devices TF_PYTEST_DIGITS=$digits \
  "$py/debian/bin/python" -m pytest -q -s -p no:cacheprovider -rs test_dlpack.py test_array.py test_hostile.py \
  test_autograd.py test_training.py
