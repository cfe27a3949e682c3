#!/usr/bin/env bash
# The official array API conformance suite (data-apis/array-api-tests,
# pinned below) against the installed package, at 2023.12 and 2024.12, and
# against array-api-strict (the reference namespace) as the yardstick.
#
# The suite is a test dependency, never committed: it is taken from
# ARRAY_API_TESTS_SRC (a checkout with its array-api submodule), else
# cloned from ARRAY_API_TESTS_REPO, else copied from git mirrors under
# TF_GIT_MIRRORS (owner+name/repo, as the tool library keeps them), into
# BUILD/array-api-tests. Where none is reachable it says so and runs
# nothing (exit 0): the suite cannot be fetched from a machine without
# GitHub. Failures are judged against python/tests/array_api_suite/known_failures.txt.
# usage: scripts/array-api-suite.sh BUILD   (after scripts/python-test.sh made BUILD/py/np2)
set -euo pipefail
build=$(realpath "${1:?usage: array-api-suite.sh BUILD}")
root=$(cd "$(dirname "$0")/.." && pwd)
suite_commit=542a14a48d369eb9ab27d769f1e8a0125beb0905   # tag 2026.02.26
spec_commit=5f847a3858875c682ae901aa22b0413bf24be9da    # its array-api submodule
repo=${ARRAY_API_TESTS_REPO:-https://github.com/data-apis/array-api-tests}
mirrors=${TF_GIT_MIRRORS:-/work/.mirror}
dest=$build/array-api-tests
py=$build/py/np2/bin/python

from_mirror() {   # from_mirror OWNER+NAME COMMIT DIR
  local git_dir=$mirrors/$1/repo
  [ -d "$git_dir" ] || return 1
  mkdir -p "$3" && git --git-dir="$git_dir" archive "$2" | tar -x -C "$3"
}

fetch() {
  rm -rf "$dest.part"
  if [ -n "${ARRAY_API_TESTS_SRC:-}" ]; then
    cp -r "$ARRAY_API_TESTS_SRC" "$dest.part"
  elif timeout 60 git clone -q "$repo" "$dest.part" 2>/dev/null; then
    git -C "$dest.part" checkout -q "$suite_commit" && git -C "$dest.part" submodule -q update --init
  elif from_mirror data-apis+array-api-tests "$suite_commit" "$dest.part"; then
    rm -rf "$dest.part/array-api"
    from_mirror data-apis+array-api "$spec_commit" "$dest.part/array-api" || return 1
  else
    return 1
  fi
  echo "$suite_commit" > "$dest.part/.tf-commit"
  mv "$dest.part" "$dest"
}

if [ "$(cat "$dest/.tf-commit" 2>/dev/null)" != "$suite_commit" ]; then
  rm -rf "$dest"
  if ! fetch; then
    rm -rf "$dest.part"
    echo "array-api-suite: not run: the suite is not reachable here (no ARRAY_API_TESTS_SRC, no clone of $repo," \
         "no mirror under $mirrors)"
    exit 0
  fi
fi
"$py" -m pip install -q -r "$dest/requirements.txt"

run() {   # run MODULE VERSION -> the failed test ids in $dest/failed-MODULE-VERSION.txt
  local out=$dest/run-$1-$2.txt
  (cd "$dest" && ARRAY_API_TESTS_MODULE=$1 ARRAY_API_TESTS_VERSION=$2 \
     "$py" -m pytest array_api_tests/ --max-examples 20 --hypothesis-seed=1 -q -p no:cacheprovider \
     -o addopts="" > "$out" 2>&1) || true
  echo "array-api-suite: $1 at $2: $(tail -1 "$out")"
  grep '^FAILED ' "$out" | sed 's/^FAILED //; s/ - .*//' > "$dest/failed-$1-$2.txt" || true
}

status=0
for version in 2023.12 2024.12; do
  # array-api-strict through the same suite shows which failures are the
  # suite's own; it is informational (nothing compares against it) and
  # costs CI time, so it runs on request (TF_ARRAY_API_BASELINE=1).
  [ "${TF_ARRAY_API_BASELINE:-0}" = 1 ] && run array_api_strict "$version"
  run tensorframe "$version"
  "$py" - "$root/python/tests/array_api_suite/known_failures.txt" "$dest/failed-tensorframe-$version.txt" \
        "$version" <<'PY' || status=1
import re, sys
known = []
for line in open(sys.argv[1]):
    line = line.strip()
    if line and not line.startswith("#"):
        pattern, _, reason = line.partition(" # ")
        known.append((re.compile(pattern), reason, [0]))
new = []
for test in (t.strip() for t in open(sys.argv[2]) if t.strip()):
    hits = [k for k in known if k[0].search(test)]
    for k in hits:
        k[2][0] += 1
    if not hits:
        new.append(test)
for pattern, reason, count in known:
    print("  %5d  %s" % (count[0], reason))
if new:
    print("array-api-suite: %d failure(s) at %s that known_failures.txt does not explain:" % (len(new), sys.argv[3]))
    for test in new:
        print("  " + test)
    sys.exit(1)
PY
done
exit $status
