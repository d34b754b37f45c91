#!/usr/bin/env bash
# The test command (README, .ci/run): set up a fresh Debian 12 machine, build with warnings as errors, run every
# test; then run them again under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# ctest runs tests in parallel on few cores: spinning OpenMP workers would starve each other.
export OMP_WAIT_POLICY=PASSIVE

# First, as it takes a second: every number README.md and docs/ quote from a results file must equal that file
# (scripts/check_claims.sh, python3). On a bare machine python3 comes with setup.sh, so then it runs right after.
claims_checked=""
if command -v python3 > /dev/null; then bash scripts/check_claims.sh && claims_checked=1; fi
bash scripts/setup.sh build -DSTRATA_WERROR=ON
[ -n "$claims_checked" ] || bash scripts/check_claims.sh
ctest --test-dir build --output-on-failure -j "$jobs"

# At -O1 -g1 (line tables, enough for the reports' stack traces) the sanitized build compiles in 40% of the time
# -O2 -g takes (router.cpp: 52 s against 127 s), which is most of CI's hour.
bash scripts/setup.sh build-asan -DSTRATA_WERROR=ON -DSTRATA_SANITIZE=ON -DSTRATA_CUDA=off -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
# libFuzzer targets (tokenizer, chat request JSON, output parser, and the EBNF, regex and JSON Schema grammar
# compilers), briefly: each for 10 s (six targets, the same minute as three at 20 s).
bash scripts/fuzz.sh 10
echo "all tests passed"
