#!/usr/bin/env bash
# Prefill/decode disaggregation on one GPU: four `strata serve` processes share it (prefill; decode with
# --prefill-peer over TCP; decode with --transfer shared, the floats GPU to GPU through CUDA IPC; colocated) on the
# demo model; PD answers vs colocated answers for both transports (pd_vs_colocated_<gpu>.json), then
# `strata bench serve` against each decode replica and the colocated one, twice (pd_bench_<gpu>_demo_<replica>_r<round>.json,
# pd_bench_<gpu>_summary.json). Needs build-gpu (tests/gpu/run.sh).
# Usage: bench/run_pd_gpu.sh OUT_DIR COMMIT
out=$1; commit=$2
w=$out; mkdir -p $w
S=./build-gpu/strata
common="--model models/demo --device cuda --max-model-len 4096 --state-memory 4GiB --max-num-seqs 32 --served-model-name demo"
$S serve $common --role prefill --port 8101 > $w/prefill.log 2>&1 &
$S serve $common --role decode --port 8102 --prefill-peer http://127.0.0.1:8101 > $w/decode.log 2>&1 &
$S serve $common --role both --port 8103 > $w/colocated.log 2>&1 &
$S serve $common --role decode --port 8104 --prefill-peer http://127.0.0.1:8101 --transfer shared > $w/decode_shared.log 2>&1 &
for p in 8101 8102 8103 8104; do
  for i in $(seq 1 60); do curl -sf localhost:$p/health > /dev/null && break; sleep 1; done
done
nvidia-smi --query-gpu=memory.used --format=csv
python3 - "$out" <<'PY'
import json, sys, urllib.request, random
out = sys.argv[1]
def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=600))
rng = random.Random(5)
rows = []
for n in [2, 100, 129, 1000, 2500, 4000]:
    body = {"prompt": [rng.randrange(1000, 30000) for _ in range(n)], "max_tokens": 16, "temperature": 0, "logprobs": 3, "ignore_eos": True}
    pd, co, sh = post(8102, body), post(8103, body), post(8104, body)
    a, b, c = pd["choices"][0], co["choices"][0], sh["choices"][0]
    same_text = a["text"] == b["text"]
    lp_a, lp_b, lp_c = a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"], c["logprobs"]["token_logprobs"]
    max_diff = max(abs(x - y) for x, y in zip(lp_a, lp_b))
    rows.append({"prompt_tokens": n, "same_tokens": same_text, "same_logprobs": lp_a == lp_b, "max_logprob_diff": max_diff,
                 "shared_same_tokens": c["text"] == b["text"], "shared_same_as_tcp": c["text"] == a["text"] and lp_c == lp_a,
                 "shared_max_logprob_diff": max(abs(x - y) for x, y in zip(lp_c, lp_b))})
    print(rows[-1])
import subprocess
gpu = subprocess.run(["bash", "scripts/provenance.sh", "--gpu"], capture_output=True, text=True).stdout.strip()
json.dump({"device": subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip(), "rows": rows}, open(f"{out}/pd_vs_colocated_{gpu}.json", "w"), indent=1)
PY
# Two rounds, the order reversed in the second, each bench on prompts of its own seed (the prefill replica's prefix
# cache helps none of them); around each, the replicas' engine-thread time writing (prefill side) and restoring
# (decode side) the states, from their /metrics, into pd_bench_<gpu>_summary.json.
gpu=$(bash scripts/provenance.sh --gpu)
seed=0
for role in decode decode_shared colocated colocated decode_shared decode; do
  seed=$((seed + 1)); round=$(( seed <= 3 ? 1 : 2 ))
  port=$(case $role in decode) echo 8102;; decode_shared) echo 8104;; *) echo 8103;; esac)
  for p in 8101 $port; do curl -s localhost:$p/metrics > $w/metrics_before_${p}_$seed.txt; done
  timeout 150 $S bench serve --url http://127.0.0.1:$port --input-len 2048 --output-len 64 --concurrency 8 --num-prompts ${PROMPTS:-128} \
    --warmup 8 --seed $seed --label "demo model (bf16), one $gpu shared by 4 processes; $role, round $round" --commit $commit \
    --plots off --out $out/pd_bench_${gpu}_demo_${role}_r$round.json > $w/bench_$role.log 2>&1
  echo "bench $role round $round rc=$?"; grep -E "throughput|TTFT|TPOT" -A0 $w/bench_$role.log | head -8
  for p in 8101 $port; do curl -s localhost:$p/metrics > $w/metrics_after_${p}_$seed.txt; done
  echo "$role $round $seed $port" >> $w/bench_runs.txt
done
python3 - "$out" "$w" "$gpu" "$commit" <<'PY'
import json, sys, datetime
out, w, gpu, commit = sys.argv[1:]
def metric(path, name):
    for line in open(path):
        if line.startswith(name + " ") or line.startswith(name + "{"): return float(line.rsplit(None, 1)[1])
    return 0.0
runs = []
for line in open(f"{w}/bench_runs.txt"):
    role, rnd, seed, port = line.split()
    def delta(p, name): return metric(f"{w}/metrics_after_{p}_{seed}.txt", name) - metric(f"{w}/metrics_before_{p}_{seed}.txt", name)
    res = json.load(open(f"{out}/pd_bench_{gpu}_demo_{role}_r{rnd}.json"))["results"]
    states = delta(port, "strata_pd_imported_states_total")
    exported = delta(8101, "strata_pd_exported_states_total")
    runs.append({"replica": role, "round": int(rnd), "seed": int(seed), "request_throughput": res["request_throughput"],
                 "ttft_ms_median": res["ttft_ms"]["median"], "tpot_ms_median": res["tpot_ms"]["median"],
                 "completed": res["completed"], "failed": res["failed"], "imported_states": states,
                 "restore_ms_per_state": 1000 * delta(port, "strata_pd_restore_seconds_total") / states if states else None,
                 "exported_states": exported,
                 "export_ms_per_state": 1000 * delta(8101, "strata_pd_export_seconds_total") / exported if exported else None,
                 "transfer_ms_per_state": 1000 * delta(port, "strata_pd_transfer_seconds_total") / states if states else None})
    print(runs[-1])
json.dump({"benchmark": "pd_vs_colocated_serve", "device": gpu, "commit": commit,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "config": "demo model bf16, 4 strata serve processes on one GPU (prefill; decode over TCP; decode --transfer shared; colocated), "
                     "strata bench serve --input-len 2048 --output-len 64 --concurrency 8 --warmup 8, a seed per run; "
                     "per-state times from the replicas' /metrics deltas (engine-thread time)",
           "runs": runs}, open(f"{out}/pd_bench_{gpu}_summary.json", "w"), indent=1)
PY
for p in 8102 8104; do curl -s localhost:$p/metrics | grep -E "^strata_pd_"; done
curl -s localhost:8101/metrics | grep -E "^strata_pd_export"
ls /dev/shm | head; nvidia-smi --query-gpu=memory.used --format=csv
kill %1 %2 %3 %4; wait
tail -3 $w/decode_shared.log
tail -3 $w/decode.log
