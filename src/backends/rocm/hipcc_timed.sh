#!/bin/sh
# Compile one code object and record how long it took beside it (OUT.time:
# "target program seconds"), so scripts/rocm-check.sh can report the compile
# time per target. Usage: hipcc_timed.sh OUT TARGET PROGRAM HIPCC ARGS...
out=$1 target=$2 program=$3
shift 3
start=$(date +%s.%N)
"$@" -o "$out" || exit 1
end=$(date +%s.%N)
echo "$target $program $(echo "$end - $start" | bc)" > "$out.time"
