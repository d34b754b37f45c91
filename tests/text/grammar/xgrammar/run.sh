#!/usr/bin/env bash
# ctest entry of the differential test against XGrammar (differential.mjs): installs the npm package from the
# committed lock file, then compares every corpus case's verdicts and masks.
# Usage: run.sh STRATA_GRAMMAR_VERDICTS WORK_DIR
# Exits 77 (ctest: skipped) only when node or npm is missing, or npm cannot fetch the package (no network);
# scripts/setup.sh installs nodejs and npm, and scripts/test.sh runs this with both present.
set -euo pipefail
verdicts=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)

skip() {
  echo "SKIP: $*"
  exit 77
}
command -v node >/dev/null || skip "node is not installed (scripts/setup.sh installs nodejs and npm)"
command -v npm >/dev/null || skip "npm is not installed (scripts/setup.sh installs nodejs and npm)"

# node_modules from the committed lock file, once per change of it; the lock on the folder keeps two runs from
# installing at the same time.
(
  cd "$here"
  flock 9
  stamp=node_modules/.strata-installed
  if ! cat package.json package-lock.json | cmp -s - "$stamp"; then
    npm ci --no-audit --no-fund --loglevel=error || exit 3
    cat package.json package-lock.json >"$stamp"
  fi
) 9<"$here" || skip "npm ci failed (no network?): cannot fetch @mlc-ai/web-xgrammar"

mkdir -p "$work"
exec node "$here/differential.mjs" --strata "$verdicts" --work "$work" --report "$work/report.json"
