#!/usr/bin/env bash
# The prefix cache's replay mode against exact mode on the CPU, on real text: a conversation of the demo model's
# own held-out questions and their answers (models/demo/heldout_eval.jsonl, turns in file order) rendered by the
# chat template into token ids, then `strata bench --cache-replay` (src/cli/bench_replay.h): logit deltas, top-1
# agreement and greedy agreement after a replay of K tokens against a cold prefill, and the bytes each mode stores.
# Writes bench/results/cache_replay_cpu_demo.json.
# Usage (repo root, after scripts/setup.sh): bash bench/run_replay_cpu.sh [BUILD_DIR] [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-bench/results/cache_replay_cpu_demo.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
python3 - models/demo/heldout_eval.jsonl "$work/request.json" <<'PY'
import json, sys
messages = [{"role": "system", "content": "You are a concise assistant. Answer briefly."}]
for line in open(sys.argv[1]):
    item = json.loads(line)
    if "content" not in item.get("expect", {}):
        continue
    messages.append({"role": "user", "content": item["request"]["messages"][-1]["content"]})
    messages.append({"role": "assistant", "content": item["expect"]["content"]})
json.dump({"messages": messages}, open(sys.argv[2], "w"))
PY
"$build/strata" chat-template --model models/demo --request "$work/request.json" --ids > "$work/ids.txt"
"$build/strata" bench --model models/demo --prompt-len 16 --decode-tokens 1 --repeats 1 --plots off \
  --cache-replay "$work/ids.txt" --replay-lengths "${LENGTHS:-512,1024,2048,4000}" \
  --commit "${COMMIT:-$(bash scripts/provenance.sh --commit)}" --out "$out" > /dev/null
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["cache_replay"]
s = r["storage"]
print(f"block {s['block_bytes']} B, boundary rows {s['boundary_rows_bytes']} B "
      f"(rows/block {s['rows_over_block']:.2f}); text of {r['text_tokens']} tokens")
for p in s["prompts"]:
    print(f"  {p['prompt_tokens']} tokens: exact {p['exact_bytes']} B, replay {p['replay_bytes']} B "
          f"({p['replay_over_exact']:.3f})")
for a in r["accuracy"]:
    for k in a["replays"]:
        print(f"{a['prompt_tokens']} tokens (cached {a['cached_prefix_tokens']}), K={k['replay_tokens']}: "
              f"max |d| {k['max_abs_logit_delta']:.4f}, mean |d| {k['mean_abs_logit_delta']:.5f}, "
              f"top-1 {k['top1_agreement']:.3f}, greedy {k['greedy_tokens_equal_before_first_difference']}/"
              f"{k['greedy_tokens_compared']}")
PY
