#!/usr/bin/env bash
# The integration tests' ctest entry: writes a tiny random checkpoint with the DeepSeek tokenizer, then runs one
# test against a real `strata serve`.
#   openai_client  the official OpenAI Node client (openai_client.test.mjs)
#   soak           200 concurrent streams, a third leaving mid-stream (soak.test.mjs)
#   curl           plain curl: whole, streamed and error responses (curl_test.sh)
#   cache          two servers sharing one prefix-cache directory, a restart, damaged files (cache_test.sh)
# Usage: run.sh openai_client|soak|curl|cache STRATA_BINARY WORK_DIR
# Exits 77 (ctest: skipped) when a tool or the test data is missing; scripts/setup.sh installs them all.
set -euo pipefail
kind=$1 binary=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
tokenizer=$here/../../.deps/tokenizer-deepseek_v3

skip() {
  echo "SKIP: $*"
  exit 77
}
[ -f "$tokenizer/tokenizer.json" ] || skip "no DeepSeek tokenizer in .deps/ (scripts/fetch_test_data.sh fetches it)"
case $kind in
  openai_client | soak)
    command -v node >/dev/null || skip "node is not installed (scripts/setup.sh installs nodejs and npm)"
    command -v npm >/dev/null || skip "npm is not installed (scripts/setup.sh installs nodejs and npm)"
    ;;
  curl | cache) command -v curl >/dev/null || skip "curl is not installed (scripts/setup.sh installs it)" ;;
  *) echo "run.sh: unknown test '$kind' (expected openai_client, soak, curl or cache)" >&2; exit 2 ;;
esac

export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
rm -rf "$work"
mkdir -p "$work"
"$binary" model init --preset tiny --tokenizer-from "$tokenizer" --out "$work/model" >/dev/null

if [ "$kind" = curl ]; then
  exec bash "$here/curl_test.sh" "$binary" "$work/model" "$work"
fi
if [ "$kind" = cache ]; then
  exec bash "$here/cache_test.sh" "$binary" "$work/model" "$work"
fi

# node_modules from the committed lock file, once per change of it. The lock on the folder keeps two test runs
# from installing at the same time.
(
  cd "$here"
  flock 9
  stamp=node_modules/.strata-installed
  if ! cat package.json package-lock.json | cmp -s - "$stamp"; then
    npm ci --no-audit --no-fund --loglevel=error
    cat package.json package-lock.json >"$stamp"
  fi
) 9<"$here"

export STRATA_BINARY=$binary STRATA_MODEL_DIR=$work/model
exec node --test --test-reporter=spec "$here/$kind.test.mjs"
