#!/usr/bin/env bash
# The prefix cache under serving load on the CPU (the demo model, models/demo/): `strata serve` with the cache on
# and with --cache off, each driven by `strata bench serve` over two workloads —
#   shared-prefix:   48 requests, one 2,048-token prefix + 64 tokens of their own, 16 generated, concurrency 4;
#   growing-history: 6 conversations × 8 turns, each turn resending the history (1,024 tokens + 192 a turn),
#                    16 generated, concurrency 6 (a turn tends to follow its predecessor).
# Writes bench/results/cache_cpu_demo.json: per workload and setting the bench serve report (TTFT, throughput, hit
# rate from usage.prompt_tokens_details.cached_tokens) and the server's prefix-cache metrics.
# Usage (repo root, after scripts/setup.sh): bash bench/run_cache_cpu.sh [BUILD_DIR] [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-bench/results/cache_cpu_demo.json}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
commit=${COMMIT:-$(bash scripts/provenance.sh --commit)}
port=${PORT:-18090}
run() {  # NAME CACHE_FLAG BENCH_ARGS...
  local name=$1 cache=$2; shift 2
  "$build/strata" serve --port $port --cache "$cache" --max-num-seqs 8 > "$work/$name.serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
  "$build/strata" bench serve --url "http://127.0.0.1:$port" --output-len 16 --commit "$commit" --plots off \
    --out "$work/$name.json" "$@" > "$work/$name.txt"
  curl -fs "http://127.0.0.1:$port/metrics" | grep '^strata_prefix_cache' > "$work/$name.metrics" || true
  kill -TERM $pid; wait $pid || true
}
shared=(--dataset shared-prefix --prefix-len 2048 --input-len 64 --num-prompts 48 --concurrency 4)
growing=(--dataset growing-history --prefix-len 1024 --input-len 192 --num-prefixes 6 --num-prompts 48 --concurrency 6)
run shared_on on "${shared[@]}"
run shared_off off "${shared[@]}"
run growing_on on "${growing[@]}"
run growing_off off "${growing[@]}"
python3 - "$work" "$out" "$commit" <<'PY'
import json, subprocess, sys
work, out, commit = sys.argv[1:]
result = {"benchmark": "prefix_cache_serving_cpu", "commit": commit,
          "date": subprocess.run(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"], capture_output=True, text=True).stdout.strip(),
          "device": subprocess.run(["bash", "scripts/provenance.sh"], capture_output=True, text=True).stdout.strip(),
          "model": "models/demo (4 layers, hidden 192, token blocks of 128 tokens)", "workloads": {}}
for w in ("shared", "growing"):
    entry = {}
    for setting in ("on", "off"):
        run = json.load(open(f"{work}/{w}_{setting}.json"))
        metrics = {}
        for line in open(f"{work}/{w}_{setting}.metrics"):
            name, value = line.rsplit(" ", 1)
            metrics[name] = float(value)
        entry["cache_" + setting] = {"config": run["config"], "results": run["results"], "server_metrics": metrics}
    on, off = entry["cache_on"]["results"], entry["cache_off"]["results"]
    entry["ttft_median_speedup"] = off["ttft_ms"]["median"] / on["ttft_ms"]["median"]
    entry["ttft_mean_speedup"] = off["ttft_ms"]["mean"] / on["ttft_ms"]["mean"]
    entry["request_throughput_ratio"] = on["request_throughput"] / off["request_throughput"]
    result["workloads"]["shared-prefix" if w == "shared" else "growing-history"] = entry
json.dump(result, open(out, "w"), indent=1)
for name, e in result["workloads"].items():
    print(f"{name}: hit rate {e['cache_on']['results']['prefix_cache_hit_rate']:.3f}, TTFT median "
          f"{e['cache_off']['results']['ttft_ms']['median']:.1f} ms -> {e['cache_on']['results']['ttft_ms']['median']:.1f} ms "
          f"({e['ttft_median_speedup']:.2f}x), throughput x{e['request_throughput_ratio']:.2f}")
PY
