#!/usr/bin/env bash
# Installs what Strata needs on a fresh Debian 12 machine (only the packages that are missing), then configures and
# builds it. Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args…]   (default BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ $# -gt 0 ] && shift

# python3: scripts/check_claims.sh and the bench / demo-model scripts (stdlib only).
packages=(g++ cmake ninja-build ccache pkg-config nlohmann-json3-dev libgtest-dev libpcre2-dev libxxhash-dev libboost-dev
          curl python3 gnuplot-nox)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (to fetch test data; the OpenAI-client tests in tests/integration; the XGrammar differential and
# the ajv check in tests/text/grammar/xgrammar) may come from Debian (12: node 18, which both run on) or from a
# Node.js install of its own; only a missing command counts.
{ command -v node && command -v npm; } >/dev/null 2>&1 || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bash scripts/fetch_test_data.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$build"
