#!/usr/bin/env bash
# Speculative decoding's speed on V4-Flash's layer shapes on one GPU (issue 17, docs/mtp.md). Random weights draft
# tokens the target never agrees with, so acceptance is FORCED to a chosen rate A (--speculative-forced-acceptance:
# each verified draft accepted with probability A by its own draw; the output is then not the model's, and every
# figure is labelled so). What is measured is the machinery's cost: the MTP layer's chained draft steps, the verify
# forward of 1 + k rows per sequence, rollback, at the batch sizes of BATCHES.
# The model: `strata model init --preset flash --layers LAYERS --mtp 1 --dtype fp8 --fill fast` (random, the DeepSeek
# tokenizer; --fill fast because exact draws take minutes per V4-Flash layer),
# run with --precision fp8. Each batch is B chat requests of PROMPT-ish tokens generating MAX_TOKENS tokens each
# (ignore_eos, greedy) at --max-num-seqs B.
# Per run: tokens/s over the engine's steps (per GPU) and per user (that divided by B), step and model time, the true
# speculation counts, and the mean accepted length; DeepSeek's full-acceptance figure (1 + N per verify step) beside
# the true one, labelled. Writes OUT_DIR/speculative_<gpu>_flash.json (<gpu> from scripts/provenance.sh --gpu: h100, h200, …) and
# OUT_DIR/progress.log.
# Usage (repo root on the GPU machine; carry .deps/include, .deps/pcre2, .deps/xxhash, .deps/debs and
# .deps/tokenizer-deepseek_v3): STRATA=build-gpu/strata bash bench/run_speculative_flash_gpu.sh OUT_DIR [COMMIT]
# Environment: LAYERS=4, BATCHES="1 16 64 256", NS="0 1 3 5" (0 first: the baseline), ACCEPT=0.75 (DeepSeek's
# example rate), STEP_COST=inf (--speculative-step-cost: verify every draft, so the machinery's cost at N is what is
# timed; a number gives the planner's cost model instead), CATCH_UP=kept (--speculative-catch-up: the MTP
# catch-up over the kept rows, or verified: over every verified row), MAX_TOKENS=64, WORK=<scratch> (default a temporary one), STRATA (default build-gpu/strata).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/run_speculative_flash_gpu.sh OUT_DIR [COMMIT]}
mkdir -p "$out"
out=$(cd "$out" && pwd)
commit=${2:-$(bash scripts/provenance.sh --commit)}
layers=${LAYERS:-4}
batches=${BATCHES:-1 16 64 256}
ns=${NS:-0 1 3 5}
accept=${ACCEPT:-0.75}
step_cost=${STEP_COST:-inf}
catch_up=${CATCH_UP:-kept}
max_tokens=${MAX_TOKENS:-64}
strata=${STRATA:-build-gpu/strata}
if [ -n "${WORK:-}" ]; then
  work=$WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$out/progress.log"; }
[ -x "$strata" ] || { log "no strata binary at $strata"; exit 1; }
[ -f .deps/tokenizer-deepseek_v3/tokenizer.json ] || { log "needs .deps/tokenizer-deepseek_v3 (carry it)"; exit 1; }
model=$work/flash$layers-mtp
if [ ! -f "$model/config.json" ]; then
  t0=$(date +%s)
  "$strata" model init --preset flash --layers "$layers" --mtp 1 --dtype fp8 --fill fast --seed 0 \
    --tokenizer-from .deps/tokenizer-deepseek_v3 --out "$model" > "$out/flash_init.log" 2>&1 \
    || { tail -20 "$out/flash_init.log"; log "model init failed"; exit 1; }
  log "flash model ($layers layers + 1 MTP layer, fp8) written in $(( $(date +%s) - t0 )) s ($(du -sh "$model" | cut -f1))"
fi
# The JSON is rewritten after every batch, from the runs done so far: a run cut short by a time limit still leaves
# its finished batches.
summarize() {
python3 - "$work" "$out" "$commit" "$layers" "$batches" "$ns" "$accept" "$max_tokens" "$step_cost" "$catch_up" <<'PY'
import json, os, subprocess, sys
work, out, commit, layers, batches, ns, accept, max_tokens, step_cost, catch_up = sys.argv[1:]
batches, ns = [int(x) for x in batches.split()], [int(x) for x in ns.split()]
prov = dict(line.split(": ", 1) for line in subprocess.run(["bash", "scripts/provenance.sh"], capture_output=True,
                                                             text=True).stdout.strip().splitlines())
runs = []
for b in batches:
    for n in ns:
        if not os.path.exists(f"{work}/summary.{b}.{n}.json"):
            continue
        s = json.load(open(f"{work}/summary.{b}.{n}.json"))
        e, sp = s["engine"], s["engine"]["speculative"]
        per_gpu = s["generated_tokens"] / e["step_seconds"]
        run = {"batch": b, "speculative_tokens": n, "generated_tokens": s["generated_tokens"], "steps": e["steps"],
               "step_seconds": e["step_seconds"], "model_seconds": e["model_seconds"],
               "draft_seconds": e.get("draft_seconds"),
               "tokens_per_s_per_gpu": per_gpu, "tokens_per_s_per_user": per_gpu / b, "speculative": sp}
        if n:
            run["forced_acceptance"] = float(accept)
            run["full_acceptance_tokens_per_verify_step (DeepSeek's accounting, not measured)"] = 1 + n
            run["full_acceptance_tokens_per_s_per_user (DeepSeek's accounting, not measured)"] = (
                (1 + n) * sp["verify_steps"] / e["step_seconds"] / b)
        runs.append(run)
for r in runs:
    base = next(x for x in runs if x["batch"] == r["batch"] and x["speculative_tokens"] == 0)
    r["speedup_vs_off"] = r["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"]
result = {"benchmark": "speculative_decoding_gpu_flash_forced_acceptance", "device": prov["device"],
          "date": prov["date"], "commit": commit,
          "config": {"model": f"random flash preset, {layers} layers + 1 MTP layer, fp8 (strata model init --preset "
                              f"flash --layers {layers} --mtp 1 --dtype fp8 --fill fast)", "precision": "fp8",
                     "acceptance": f"FORCED to {accept} per verified draft (--speculative-forced-acceptance): the "
                                   "outputs are not the model's; this measures speed at that rate",
                     "requests_per_batch": "= batch", "max_tokens": int(max_tokens), "ignore_eos": True,
                     "temperature": 0, "speculative_min_prob": 0,
                     "speculative_step_cost": step_cost + (" (every draft verified)" if step_cost == "inf" else " rows"),
                     "speculative_catch_up": catch_up,
                     "note": "tokens/s over the engine's steps (prefill included); per user = per GPU / batch"},
          "runs": runs}
gpu = subprocess.run(["bash", "scripts/provenance.sh", "--gpu"], capture_output=True, text=True).stdout.strip()
json.dump(result, open(f"{out}/speculative_{gpu}_flash.json", "w"), indent=1)
for r in runs:
    sp = r["speculative"]
    print(f"batch {r['batch']:3d} N {r['speculative_tokens']}: {r['tokens_per_s_per_gpu']:8.0f} tok/s/GPU "
          f"{r['tokens_per_s_per_user']:7.1f} tok/s/user ({r['speedup_vs_off']:.2f}x), "
          f"mean accepted length {sp.get('mean_accepted_length', 0):.2f}")
PY
}
for b in $batches; do
  python3 - "$work/requests.$b.jsonl" "$b" "$max_tokens" <<'PY'
import json, sys
path, b, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "w") as f:
    for i in range(b):
        f.write(json.dumps({"custom_id": i, "messages": [{"role": "user", "content": f"Tell me about person number {i}."}],
                            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}) + "\n")
PY
  for n in $ns; do
    spec=(--speculative-tokens "$n")
    [ "$n" -gt 0 ] && spec+=(--speculative-forced-acceptance "$accept" --speculative-min-prob 0 --speculative-step-cost "$step_cost" --speculative-catch-up "$catch_up")
    t0=$(date +%s.%N)
    "$strata" generate --model "$model" --device cuda --precision fp8 --input "$work/requests.$b.jsonl" \
      --output "$work/out.$b.$n.jsonl" --max-num-seqs "$b" --max-model-len 1024 "${spec[@]}" \
      --summary "$work/summary.$b.$n.json" > "$work/log.$b.$n" 2>&1 || { tail -20 "$work/log.$b.$n"; log "batch $b N $n failed"; exit 1; }
    log "batch $b N $n: $(python3 -c "
import json, sys
s = json.load(open(sys.argv[1])); e = s['engine']
print(f\"{s['generated_tokens']} tokens, {s['generated_tokens'] / max(e['step_seconds'], 1e-12):.0f} tok/s over steps, {e['steps']} steps\")
" "$work/summary.$b.$n.json") ($(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s)"
  done
  summarize
done
