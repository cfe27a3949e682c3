"""Two builds of the library under one tf-bench, in alternating pairs: the
median time of each op before and after a change, and their ratio.

    python3 bench/lib_pairs.py TF_BENCH OPS PAIRS BEFORE_LIB_DIR AFTER_LIB_DIR

TF_BENCH is a tf-bench binary (it uses the public API only, so the older
library runs under it); each run gets LD_LIBRARY_PATH set to one library
folder, the order alternating pair by pair. Run on a quiet machine, and an
A/A run (a library against a copy of itself) to see the noise."""
import os
import re
import statistics
import subprocess
import sys


def main(argv):
    if len(argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    bench, ops, pairs, libs = argv[0], argv[1], int(argv[2]), argv[3:5]
    times = {lib: {} for lib in libs}
    for i in range(pairs):
        for lib in (libs if i % 2 == 0 else libs[::-1]):
            env = dict(os.environ, LD_LIBRARY_PATH=lib)
            out = subprocess.run([bench, "--ops", ops], env=env, capture_output=True, text=True, check=True).stdout
            for line in out.splitlines()[1:]:
                m = re.match(r"(\S+)\s+(.+?)\s+([\d.]+) (ms|us)", line)
                if m:
                    key = f"{m.group(1)} {m.group(2).strip()}"
                    times[lib].setdefault(key, []).append(float(m.group(3)) * (1e-3 if m.group(4) == "us" else 1))
    for key, before in times[libs[0]].items():
        a, b = statistics.median(before), statistics.median(times[libs[1]][key])
        print(f"{key:40s} before {a:10.5f} ms  after {b:10.5f} ms  after/before {b / a:5.3f}  ({len(before)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
