#!/usr/bin/env bash
# A missing rank ends the job with an error, not a hang: test_comm_abort
# under mpirun -np 2, once with a late rank (the other times out and calls
# tf_comm_abort: exit status 3) and once with a rank that exits (the job
# ends non-zero). Each must end within 30 s.
# usage: abort.sh <mpiexec> <test_comm_abort>
set -uo pipefail
mpiexec=$1 exe=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failed=0
run() {   # mode, what the status must satisfy, what the output must hold
  local mode=$1 want=$2 text=$3 out status start=$SECONDS
  out=$(timeout 30 "$mpiexec" -np 2 --oversubscribe "$exe" "$mode" 2>&1); status=$?
  local took=$((SECONDS - start))
  if [ "$status" -eq 124 ]; then echo "FAIL  $mode: the job hung (killed after 30 s)"; failed=1; return; fi
  if ! eval "[ $status $want ]"; then echo "FAIL  $mode: exit status $status, want $want"; failed=1; return; fi
  if ! grep -q "$text" <<< "$out"; then echo "FAIL  $mode: no '$text' in:"; echo "$out"; failed=1; return; fi
  echo "ok    $mode: ended in ${took} s, exit status $status"
}
run late "-eq 3" "TF_ERR_TIMEOUT: tf_all_reduce: rank 0 waited 0.5 s"
run dies "-ne 0" "exited"
exit $failed
