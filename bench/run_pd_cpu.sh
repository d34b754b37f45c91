#!/usr/bin/env bash
# Prefill/decode disaggregation vs colocated replicas at the same replica count, on the CPU with the demo model:
# two `strata serve --role both` behind `strata route --policy least_load`, then one `--role prefill` and one
# `--role decode` behind `strata route --prefill --decode`; `strata bench serve` through the router for each.
# Each replica gets one OpenMP thread (OMP_NUM_THREADS=1), so the two replicas split the machine alike.
# Usage: bench/run_pd_cpu.sh [BUILD_DIR] [OUT_DIR]   (default build, bench/results)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}; out=${2:-bench/results}
S=$build/strata
commit=$(git rev-parse --short HEAD)
logs=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; }
trap cleanup EXIT
up() { for _ in $(seq 1 120); do curl -sf "localhost:$1/health" > /dev/null && return 0; sleep 0.5; done; echo "port $1 did not come up" >&2; return 1; }
serve() { OMP_NUM_THREADS=1 $S serve --port "$1" --max-num-seqs 16 "${@:2}" > "$logs/serve_$1.log" 2>&1 & pids+=($!); }
bench() {
  $S bench serve --url http://127.0.0.1:8300 --input-len 512 --output-len 32 --concurrency 4 --num-prompts 24 \
    --warmup 2 --slo-ttft-ms 2000 --slo-tpot-ms 100 --label "$1" --commit "$commit" --plots off --out "$2"
}
serve 8301; serve 8302
up 8301; up 8302
$S route --port 8300 --policy least_load --backend http://127.0.0.1:8301 --backend http://127.0.0.1:8302 > "$logs/route.log" 2>&1 & pids+=($!)
up 8300
bench "demo model, CPU, 2 colocated replicas behind strata route (least_load)" "$out/pd_cpu_demo_colocated.json"
cleanup; pids=()
serve 8301 --role prefill; serve 8302 --role decode
up 8301; up 8302
$S route --port 8300 --prefill http://127.0.0.1:8301 --decode http://127.0.0.1:8302 > "$logs/route.log" 2>&1 & pids+=($!)
up 8300
bench "demo model, CPU, 1 prefill + 1 decode replica behind strata route" "$out/pd_cpu_demo_pd.json"
curl -s localhost:8302/metrics | grep -E '^strata_pd_transfer'
