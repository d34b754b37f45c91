#!/usr/bin/env bash
# Prefill/decode disaggregation on one GPU: four `strata serve` processes share it (prefill; decode with
# --prefill-peer over TCP; decode with --transfer shared, the floats GPU to GPU through CUDA IPC; colocated) on the
# demo model; PD answers vs colocated answers for both transports (pd_vs_colocated_h200.json), then
# `strata bench serve` against each decode replica and the colocated one. Needs build-gpu (tests/gpu/run.sh).
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
json.dump({"device": "NVIDIA H200", "rows": rows}, open(f"{out}/pd_vs_colocated_h200.json", "w"), indent=1)
PY
for role in decode decode_shared colocated; do
  port=$(case $role in decode) echo 8102;; decode_shared) echo 8104;; *) echo 8103;; esac)
  timeout 150 $S bench serve --url http://127.0.0.1:$port --input-len 2048 --output-len 64 --concurrency 8 --num-prompts 32 \
    --warmup 4 --label "demo model (bf16), one H200 shared by 3 processes; $role" --commit $commit --plots off \
    --out $out/pd_bench_h200_$role.json > $w/bench_$role.log 2>&1
  echo "bench $role rc=$?"; grep -E "throughput|TTFT|TPOT" -A0 $w/bench_$role.log | head -8
done
for p in 8102 8104; do curl -s localhost:$p/metrics | grep -E "^strata_pd_"; done
curl -s localhost:8101/metrics | grep -E "^strata_pd_exported"
ls /dev/shm | head; nvidia-smi --query-gpu=memory.used --format=csv
kill %1 %2 %3 %4; wait
tail -3 $w/decode_shared.log
tail -3 $w/decode.log
