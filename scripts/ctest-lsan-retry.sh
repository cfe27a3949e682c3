#!/usr/bin/env bash
# ctest under the sanitizers, with one narrow exception: when LeakSanitizer's
# own tracer fails ("LeakSanitizer has encountered a fatal error" -- it could
# not stop the process's threads, seen once with PoCL's worker threads at
# exit; it is not a leak report), the failed tests run once more. Any other
# failure, and a second tracer failure, fail the run.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
ctest --output-on-failure 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && grep -q "LeakSanitizer has encountered a fatal error" "$log" \
   && ! grep -q "ERROR: LeakSanitizer: detected memory leaks\|ERROR: AddressSanitizer\|runtime error:" "$log"; then
  echo "== LeakSanitizer's tracer failed (not a leak report): rerunning the failed tests once =="
  ctest --rerun-failed --output-on-failure
  rc=$?
fi
exit "$rc"
