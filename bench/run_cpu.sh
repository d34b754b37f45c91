#!/usr/bin/env bash
# CPU forward benchmark of the tiny and small presets; writes bench/results/cpu_{tiny,small}.json.
# Usage (repo root, after scripts/setup.sh): bash bench/run_cpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
commit=$(bash scripts/provenance.sh --commit)  # "-dirty" when tracked files had uncommitted changes
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
for preset in tiny small; do
  "$build/strata" model init --preset "$preset" --seed 0 --out "$models/$preset" >/dev/null
  "$build/strata" bench --model "$models/$preset" --prompt-len 512 --decode-tokens 64 --repeats 3 \
    --commit "$commit" --out "bench/results/cpu_$preset.json" >/dev/null
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], 'prefill %.0f tok/s, decode %.1f tok/s' % (j['prefill']['tokens_per_s'], j['decode']['tokens_per_s']))" "bench/results/cpu_$preset.json" "$preset"
done
