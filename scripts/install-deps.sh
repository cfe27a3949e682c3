#!/usr/bin/env bash
# Install the Debian packages tensorframe builds and tests with. Idempotent
# and quiet when everything is already there; installs only what is missing.
set -euo pipefail

packages=(
  build-essential   # gcc, make
  cmake             # 3.25 or newer
  python3           # tools/gen_formulas.py: the elementwise kernels, generated at build time
  pkg-config        # finds cmocka; the install test's pkg-config consumer
  libcmocka-dev     # unit test framework
  libopenblas-dev   # CBLAS for large GEMM on the CPU (and the benchmark's peer)
  ocl-icd-opencl-dev opencl-headers   # OpenCL plugin: ICD loader and headers
  pocl-opencl-icd   # an OpenCL device on the CPU, so the plugin is tested for real
  clinfo            # to see what OpenCL offers
  hipcc libamdhip64-dev   # the ROCm plugin: compiled for AMD targets here (nothing HIP runs without an AMD GPU)
  clang libclang-rt-dev   # libFuzzer for the loaders' fuzz targets (make test, make fuzz)
  python3-numpy     # tests/gguf/check_dequant.py (with the gguf package fetch-models.sh brings)
  openmpi-bin libopenmpi-dev   # libtensorframe_mpi (collectives) and its mpirun tests
  python3-venv python3-torch   # the Python package's tests: venvs under the build folder, PyTorch 1.13 for DLPack
  python3-dev       # Python.h for the package's C layer (python/csrc/native.c, the stable ABI)
  libfftw3-double3  # FFTW 3, which tf_fft/tf_rfft/tf_irfft load at run time (src/ops/fft.c: GPL, never linked)
)

# `--python`: only what building the Python wheel needs (pip install ./python)
if [ "${1:-}" = "--python" ]; then
  packages=(build-essential cmake python3 python3-dev libopenblas-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
            libfftw3-double3)
fi

# `--bench`: also what bench/compare.py runs with (Debian's python3 packages)
if [ "${1:-}" = "--bench" ]; then
  packages+=(python3-torch python3-matplotlib)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
