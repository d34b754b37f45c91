#!/usr/bin/env bash
# Speculative decoding with the demo model's trained MTP layer on the CPU (issue 17, docs/mtp.md): `strata generate
# --input` runs the CI eval set's 240 chat requests (models/demo/heldout_eval.jsonl, greedy) with
# --speculative-tokens N for N = 0 (off), 1, 2, 3, 5, at --max-num-seqs 1 (tokens/s per user) and 64 (a batch).
# Per run: the summary's throughput and the true speculation counts (drafted, verified, accepted, verify steps,
# emitted, dropped past an end, by draft position); the mean accepted length; and whether every reply equals the
# non-speculative run's (tool call ids aside, which are random). DeepSeek's full-acceptance figure (1 + N tokens
# per verify step) is written beside the true one, labelled. Writes bench/results/speculative_cpu_demo.json.
# Usage (repo root, after scripts/setup.sh): bash bench/run_speculative_cpu.sh [BUILD_DIR] [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-bench/results/speculative_cpu_demo.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
commit=${COMMIT:-$(bash scripts/provenance.sh --commit)}
python3 tools/demo_model/eval_requests.py "$work/requests.jsonl"
for seqs in 1 64; do
  for n in 0 1 2 3 5; do
    "$build/strata" generate --model models/demo --input "$work/requests.jsonl" --output "$work/out.$seqs.$n.jsonl" \
      --max-num-seqs "$seqs" --speculative-tokens "$n" --summary "$work/summary.$seqs.$n.json" 2> "$work/log.$seqs.$n"
  done
done
python3 - "$work" "$out" "$commit" <<'PY'
import json, os, subprocess, sys
sys.path.insert(0, "tools/demo_model")
from eval_requests import replies
work, out, commit = sys.argv[1:]

runs = []
for seqs in (1, 64):
    plain = replies(f"{work}/out.{seqs}.0.jsonl")
    for n in (0, 1, 2, 3, 5):
        s = json.load(open(f"{work}/summary.{seqs}.{n}.json"))
        got = replies(f"{work}/out.{seqs}.{n}.jsonl")
        sp = s["engine"]["speculative"]
        run = {"max_num_seqs": seqs, "speculative_tokens": n, "generated_tokens": s["generated_tokens"],
               "wall_s": s["wall_s"], "generated_tokens_per_s": s["generated_tokens_per_s"],
               "engine_steps": s["engine"]["steps"], "replies_equal_to_speculation_off": sum(got[k] == plain[k] for k in plain),
               "speculative": sp}
        if n:
            run["full_acceptance_tokens_per_verify_step (DeepSeek's accounting, not measured)"] = 1 + n
        runs.append(run)
for r in runs:
    base = next(b for b in runs if b["max_num_seqs"] == r["max_num_seqs"] and b["speculative_tokens"] == 0)
    r["speedup_vs_off"] = r["generated_tokens_per_s"] / base["generated_tokens_per_s"]
result = {"benchmark": "speculative_decoding_cpu_demo", "commit": commit,
          "date": subprocess.run(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"], capture_output=True, text=True).stdout.strip(),
          "device": subprocess.run(["bash", "scripts/provenance.sh"], capture_output=True, text=True).stdout.strip().splitlines()[0],
          "config": {"model": "models/demo (with its trained MTP layer)", "requests": len(plain),
                     "set": "models/demo/heldout_eval.jsonl (the CI eval set), temperature 0",
                     "speculative_min_prob": 0.1, "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "all cores"),
                     "note": "grammar-constrained requests (tool calls, JSON) do not speculate; their tokens are in "
                             "generated_tokens but not in speculative.emitted"},
          "runs": runs}
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
json.dump(result, open(out, "w"), indent=1)
for r in runs:
    sp = r["speculative"]
    print(f"seqs {r['max_num_seqs']:3d} N {r['speculative_tokens']}: {r['generated_tokens_per_s']:7.1f} tok/s "
          f"({r['speedup_vs_off']:.2f}x), equal {r['replies_equal_to_speculation_off']}/{len(plain)}, "
          f"accepted {sp['accepted']}/{sp['verified']}, mean accepted length {sp['mean_accepted_length']:.2f}")
PY
