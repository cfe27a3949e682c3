#!/usr/bin/env bash
# The autotuning targets on one device, in a fresh cache directory:
#   1. TF_AUTOTUNE=0: the built-in heuristic's time per shape (the default);
#   2. TF_AUTOTUNE=1, first run: tunes every shape (timing launches > 0);
#   3. TF_AUTOTUNE=1, second run: reads the file, times nothing (0 launches);
#   4. the file's first line changed (another library): discarded, tuned again.
# Prints tuned / default per shape. --check fails (exit 1) when a target is
# missed: launches in run 3, a file not discarded, a wrong sum (the sweep
# checks every sum against float64). Exit 77 when the device is absent.
# usage: autotune.sh BUILD_DIR [DEVICE] [--quick] [--check]
set -euo pipefail
build=$1; device=${2:-opencl:0}; shift $(( $# >= 2 ? 2 : 1 ))
quick=""; check=0
for a in "$@"; do case $a in --quick) quick=--quick;; --check) check=1;; esac; done
sweep=$build/bin/autotune_sweep
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
export TF_CACHE_DIR=$dir NODEVICE_SELECT=1
run() { TF_AUTOTUNE=$1 "$sweep" "$device" $quick; }
set +e; default=$(run 0); rc=$?; set -e
[ $rc -eq 77 ] && { echo "$default"; exit 77; }
[ $rc -eq 0 ] || { echo "$default"; exit 1; }
first=$(run 1); second=$(run 1)
stat() { sed -n "s/.* $2 \([0-9]*\).*/\1/p" <<< "$1" | tail -1; }
file=$(ls "$dir"/tune/*.csv)
sed -i '1s/library=[^,]*/library=0.0.0-other/' "$file"
third=$(run 1)
echo "$first" | head -1
printf '%-22s %12s %12s %12s %8s\n' shape "default us" "tuned us" "2nd run us" "ratio"
paste <(grep '^shape' <<< "$default") <(grep '^shape' <<< "$first") <(grep '^shape' <<< "$second") |
  awk -F'\t' '{ split($1, a, ": "); split($2, b, ": "); split($3, c, ": ");
               d = a[2] + 0; t = c[2] + 0;
               printf "%-22s %12.1f %12.1f %12.1f %7.2fx\n", a[1], d, b[2] + 0, t, t / d }'
echo "run 2 (tuning):   $(grep '^autotune:' <<< "$first")"
echo "run 3 (cached):   $(grep '^autotune:' <<< "$second")"
echo "run 4 (new header): $(grep '^autotune:' <<< "$third")"
[ $check -eq 1 ] || exit 0
fail=0
[ "$(stat "$first" timing_launches)" -gt 0 ] || { echo "FAIL: the first tuned run timed nothing"; fail=1; }
[ "$(stat "$second" timing_launches)" -eq 0 ] || { echo "FAIL: the second run made timing launches"; fail=1; }
[ "$(stat "$second" hits)" -eq "$(stat "$second" lookups)" ] || { echo "FAIL: the second run missed the cache"; fail=1; }
[ "$(stat "$third" discarded_files)" -eq 1 ] || { echo "FAIL: a file with another header was kept"; fail=1; }
[ "$(stat "$third" timing_launches)" -gt 0 ] || { echo "FAIL: after the discard nothing was tuned"; fail=1; }
[ "$(stat "$default" lookups)" -eq 0 ] || { echo "FAIL: TF_AUTOTUNE=0 asked the tuner"; fail=1; }
head -1 "$file" | grep -q '^tensorframe-tune,1,library=' || { echo "FAIL: no header in $file"; fail=1; }
[ $fail -eq 0 ] && echo "autotune: every check passed"
exit $fail
