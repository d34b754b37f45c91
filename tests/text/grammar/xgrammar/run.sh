#!/usr/bin/env bash
# ctest entry of the node-side grammar checks (docs/grammar.md): installs the npm packages from the committed lock
# file, then runs one check.
#   run.sh differential STRATA_GRAMMAR_VERDICTS WORK_DIR      XGrammar against Strata (differential.mjs)
#   run.sh constrained STRATA_BINARY random|demo WORK_DIR [quick]   ajv / RegExp on constrained outputs
#                                                              (constrained_outputs.mjs; quick: fewer, shorter outputs,
#                                                              for the sanitizer build)
# Exits 77 (ctest: skipped) only when node or npm is missing, npm cannot fetch the packages (no network), or the
# model is absent (the DeepSeek tokenizer in .deps/ for the random model, models/demo/ for the demo model);
# scripts/setup.sh installs nodejs and npm and fetches the tokenizer, so CI runs them all.
set -euo pipefail
kind=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)

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
) 9<"$here" || skip "npm ci failed (no network?): cannot fetch @mlc-ai/web-xgrammar, ajv, ajv-formats"

case $kind in
  differential)
    verdicts=$2 work=$3
    mkdir -p "$work"
    exec node "$here/differential.mjs" --strata "$verdicts" --work "$work" --report "$work/report.json"
    ;;
  constrained)
    binary=$2 label=$3 work=$4 quick=${5:-}
    rm -rf "$work"
    mkdir -p "$work"
    if [ "$label" = demo ]; then
      model=$root/models/demo
      [ -f "$model/config.json" ] || skip "no models/demo/ (the committed demo model)"
      # The demo model writes JSON it was trained on: most outputs close, so some must.
      if [ -n "$quick" ]; then sizes=(--n 1 --max-tokens 96 --min-finished 5); else sizes=(--n 2 --max-tokens 160 --min-finished 10); fi
      exec node "$here/constrained_outputs.mjs" --strata "$binary" --model "$model" --label demo --work "$work" "${sizes[@]}"
    fi
    tokenizer=$root/.deps/tokenizer-deepseek_v3
    [ -f "$tokenizer/tokenizer.json" ] || skip "no DeepSeek tokenizer in .deps/ (scripts/fetch_test_data.sh fetches it)"
    "$binary" model init --preset tiny --seed 5 --tokenizer-from "$tokenizer" --out "$work/model" >/dev/null
    # Random weights rarely pick the token that closes a string or ends a number among thousands allowed: most
    # outputs are cut by max_tokens; the finite ones (enums, bounded integers, choices) finish and are validated.
    if [ -n "$quick" ]; then sizes=(--n 1 --max-tokens 48); else sizes=(--n 4 --max-tokens 96); fi
    exec node "$here/constrained_outputs.mjs" --strata "$binary" --model "$work/model" --label random --work "$work" "${sizes[@]}"
    ;;
  *) echo "run.sh: unknown check '$kind' (expected differential or constrained)" >&2; exit 2 ;;
esac
