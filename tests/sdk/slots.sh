#!/usr/bin/env bash
# Every slot backend.h documents must be called by the core: run
# sdk_exercise with the example backend recording its calls, then check each
# slot of tf_device_iface and tf_backend_iface against the record.
# usage: slots.sh <sdk_exercise> <backend.h> <good plugin dir>
set -euo pipefail
exe=$1 header=$2 plugins=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
MYBACKEND_SLOT_LOG=$log MYBACKEND_DEVICES=2 TF_PLUGIN_PATH=$plugins "$exe"

# Slots called only on the host (CPU) backend, which the example backend
# cannot stand in for, with the test that covers each.
declare -A host_only=(
  [buffer_from_host_ptr]="the CPU fallback wraps a host-memory device's buffers (conformance on mybackend:0)"
)

slots=$(awk '/^typedef struct tf_(device|backend)_iface \{/,/^\} tf_(device|backend)_iface;/' "$header" |
        grep -o '(\*[a-z_]*)' | tr -d '(*)')
[ -n "$slots" ] || { echo "no slots found in $header"; exit 1; }
passed=0 failed=0
for slot in $slots; do
  calls=$(awk -v s="$slot" '$2 == s { n += $3 } END { print n + 0 }' "$log")
  if [ "$calls" -gt 0 ]; then
    printf 'ok    %-22s %s calls\n' "$slot" "$calls"; passed=$((passed + 1))
  elif [ -n "${host_only[$slot]:-}" ]; then
    printf 'ok    %-22s host backend only: %s\n' "$slot" "${host_only[$slot]}"; passed=$((passed + 1))
  else
    printf 'FAIL  %-22s documented in backend.h, never called by the core\n' "$slot"; failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
