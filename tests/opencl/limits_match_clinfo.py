"""tf-info's limits for opencl:0 against `clinfo --raw` for the same device:
compute units, largest allocation, work-group size, local memory, the
global memory cache. usage: limits_match_clinfo.py TF_INFO"""
import re
import subprocess
import sys

info = subprocess.run([sys.argv[1]], capture_output=True, text=True, check=True).stdout
block = info.split("  opencl:0 ", 1)
if len(block) < 2:
    print("no opencl:0 device: nothing to compare")
    sys.exit(77)
limits = re.search(r"limits: buffer (\d+) MiB, binding \d+ MiB, (\d+) compute units, work-group (\d+) .*?"
                   r"shared (\d+) KiB, caches \d+ / (\d+) / \d+ KiB", block[1])
assert limits, block[1][:400]
ours = dict(zip(["CL_DEVICE_MAX_MEM_ALLOC_SIZE", "CL_DEVICE_MAX_COMPUTE_UNITS", "CL_DEVICE_MAX_WORK_GROUP_SIZE",
                 "CL_DEVICE_LOCAL_MEM_SIZE", "CL_DEVICE_GLOBAL_MEM_CACHE_SIZE"], map(int, limits.groups())))
scale = {"CL_DEVICE_MAX_MEM_ALLOC_SIZE": 1 << 20, "CL_DEVICE_LOCAL_MEM_SIZE": 1 << 10,
         "CL_DEVICE_GLOBAL_MEM_CACHE_SIZE": 1 << 10}
raw = subprocess.run(["clinfo", "--raw"], capture_output=True, text=True, check=True).stdout
# opencl:0 is the first device of the first platform with one (tensorframe's order).
first = re.search(r"^\[([^/\]]+)/0\]", raw, re.M).group(1)
for key, value in ours.items():
    m = re.search(rf"^\[{re.escape(first)}/0\]\s+{key}\s+(\d+)", raw, re.M)
    assert m, f"clinfo has no {key}"
    want = int(m.group(1)) / scale.get(key, 1)
    assert abs(want - value) < 1, f"{key}: tf-info {value}, clinfo {want}"
    print(f"{key}: {value} (clinfo {want:g})")
