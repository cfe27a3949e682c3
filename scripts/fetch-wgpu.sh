#!/usr/bin/env bash
# wgpu-native for the WebGPU plugin, from the PyPI wheel `wgpu` 0.32.0, which
# ships webgpu.h (the standard WebGPU C API), wgpu.h (wgpu-native's extras)
# and libwgpu_native-release.so. Cached in DIR (nothing downloaded is
# committed): the headers build the plugin, the library is copied beside it
# and loaded at run time. Also installs the Vulkan loader and Mesa's lavapipe
# (a Vulkan device on the CPU), so the plugin is tested for real here.
# usage: scripts/fetch-wgpu.sh DIR
set -euo pipefail
dir=${1:?usage: fetch-wgpu.sh DIR}
need=()
for p in libvulkan1 mesa-vulkan-drivers; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "fetch-wgpu: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" > /dev/null
fi
[ -f "$dir/webgpu.h" ] && [ -f "$dir/wgpu.h" ] && [ -f "$dir/libwgpu_native-release.so" ] && exit 0
mkdir -p "$dir/wheel"
source "$(dirname "$0")/find-pip.sh"
echo "fetch-wgpu: downloading wgpu 0.32.0 (wgpu-native) from PyPI into $dir"
$pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 -d "$dir/wheel" wgpu==0.32.0
/usr/bin/python3 - "$dir" <<'PY'
import glob, os, sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(glob.glob(os.path.join(d, "wheel", "wgpu-*.whl"))[0]) as z:
    for name in ("webgpu.h", "wgpu.h", "libwgpu_native-release.so"):
        with open(os.path.join(d, name), "wb") as f:
            f.write(z.read("wgpu/resources/" + name))
PY
rm -rf "$dir/wheel"
