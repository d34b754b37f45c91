#!/usr/bin/env bash
# Speculative decoding with the demo model's trained MTP layer (issue 17, docs/mtp.md): `strata generate --input`
# runs the CI eval set's 240 chat requests (models/demo/heldout_eval.jsonl, greedy) with --speculative-tokens N for
# N = 0 (off), 1, 2, 3, 5, at each --max-num-seqs of SEQS (default "1 64": tokens/s per user, and a batch).
# Per run: the summary's throughput, the engine's step and model time, and the true speculation counts (drafted,
# verified, accepted, verify steps, emitted, dropped past an end, by draft position); the mean accepted length; and
# whether every reply equals the non-speculative run's (tool call ids aside, which are random). DeepSeek's
# full-acceptance figure (1 + N tokens per verify step) is written beside the true one, labelled.
# Usage (repo root, after scripts/setup.sh): bash bench/run_speculative_demo.sh [BUILD_DIR] [OUT_JSON]
# Environment: DEVICE=cpu (default) or cuda (a BUILD_DIR built with -DSTRATA_CUDA=on; bf16, CUDA graphs on),
# SEQS="1 64", NS="0 1 2 3 5" (0 must be among them: the reference replies and the speed baseline), EVERY=1 (take
# every EVERY-th request of the set: EVERY=5 is 48 requests, for a batch-1 run that must end sooner).
# Default OUT_JSON: bench/results/speculative_cpu_demo.json (cpu) or speculative_<gpu>_demo.json (cuda; <gpu> from
# scripts/provenance.sh --gpu: h100, h200, …).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
device=${DEVICE:-cpu}
seqs_list=${SEQS:-1 64}
ns=${NS:-0 1 2 3 5}
case "$device" in
  cpu) default_out=bench/results/speculative_cpu_demo.json ;;
  cuda) default_out=bench/results/speculative_$(bash scripts/provenance.sh --gpu)_demo.json ;;
  *) echo "run_speculative_demo: DEVICE must be cpu or cuda, got '$device'" >&2; exit 1 ;;
esac
out=${2:-$default_out}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
commit=${COMMIT:-$(bash scripts/provenance.sh --commit)}
every=${EVERY:-1}
python3 tools/demo_model/eval_requests.py "$work/requests.jsonl" "$every"
for seqs in $seqs_list; do
  for n in $ns; do
    "$build/strata" generate --model models/demo --device "$device" --input "$work/requests.jsonl" \
      --output "$work/out.$seqs.$n.jsonl" --max-num-seqs "$seqs" --speculative-tokens "$n" \
      --summary "$work/summary.$seqs.$n.json" 2> "$work/log.$seqs.$n" || { tail -20 "$work/log.$seqs.$n"; exit 1; }
    echo "seqs $seqs N $n: done" >&2
  done
done
python3 - "$work" "$out" "$commit" "$device" "$seqs_list" "$ns" "$every" <<'PY'
import json, os, subprocess, sys
sys.path.insert(0, "tools/demo_model")
from eval_requests import replies
work, out, commit, device, seqs_list, ns, every = sys.argv[1:]
seqs_list, ns = [int(x) for x in seqs_list.split()], [int(x) for x in ns.split()]

runs = []
for seqs in seqs_list:
    plain = replies(f"{work}/out.{seqs}.0.jsonl")
    for n in ns:
        s = json.load(open(f"{work}/summary.{seqs}.{n}.json"))
        got = replies(f"{work}/out.{seqs}.{n}.jsonl")
        e, sp = s["engine"], s["engine"]["speculative"]
        differ = sorted(k for k in plain if got.get(k) != plain[k])
        run = {"max_num_seqs": seqs, "speculative_tokens": n, "generated_tokens": s["generated_tokens"],
               "wall_s": s["wall_s"], "generated_tokens_per_s": s["generated_tokens_per_s"],
               "engine_steps": e["steps"], "step_seconds": e["step_seconds"], "model_seconds": e["model_seconds"],
               "replies_equal_to_speculation_off": len(plain) - len(differ),
               "replies_differing": differ[:20], "speculative": sp}
        if n:
            run["full_acceptance_tokens_per_verify_step (DeepSeek's accounting, not measured)"] = 1 + n
        runs.append(run)
for r in runs:
    base = next(b for b in runs if b["max_num_seqs"] == r["max_num_seqs"] and b["speculative_tokens"] == 0)
    r["speedup_vs_off"] = r["generated_tokens_per_s"] / base["generated_tokens_per_s"]
prov = subprocess.run(["bash", "scripts/provenance.sh"], capture_output=True, text=True).stdout.strip().splitlines()
result = {"benchmark": f"speculative_decoding_{device}_demo", "commit": commit,
          "date": subprocess.run(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"], capture_output=True, text=True).stdout.strip(),
          "device": prov[0].split(": ", 1)[1],
          "config": {"model": "models/demo (with its trained MTP layer)", "backend": device,
                     "precision": "bf16" if device == "cuda" else "fp32", "requests": len(plain),
                     "set": "models/demo/heldout_eval.jsonl (the CI eval set), temperature 0"
                            + (f", every {every}th request" if every != "1" else ""),
                     "speculative_min_prob": 0.1, "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "all cores"),
                     "note": "grammar-constrained requests (tool calls, JSON) speculate under their masks; "
                             "speculative.emitted counts the tokens of verify steps only (not prefill's first token)"},
          "runs": runs}
os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
json.dump(result, open(out, "w"), indent=1)
for r in runs:
    sp = r["speculative"]
    print(f"seqs {r['max_num_seqs']:3d} N {r['speculative_tokens']}: {r['generated_tokens_per_s']:7.1f} tok/s "
          f"({r['speedup_vs_off']:.2f}x), {1e3 * r['step_seconds'] / max(1, r['engine_steps']):.3f} ms/step, "
          f"equal {r['replies_equal_to_speculation_off']}/{len(plain)}, accepted {sp['accepted']}/{sp['verified']}, "
          f"mean accepted length {sp['mean_accepted_length']:.2f}")
PY
