#!/usr/bin/env bash
# Speculative decoding on the demo model's trained MTP layer (issue 17): `strata generate --input` on the CI eval set
# (models/demo/heldout_eval.jsonl, greedy) with --speculative-tokens 3 gives every reply of the run without it
# (tool call ids aside: they are random), and the layer's drafts are mostly accepted (more than 80% of those
# verified: a broken draft path, which drafts garbage, is accepted near 0%).
# Usage: speculative_demo.sh STRATA REPO_ROOT WORK_DIR   (STRATA_SPECULATIVE_EVERY=K: every K-th request only;
# STRATA_DEVICE=cuda: on the GPU, as tests/gpu/run.sh runs it)
set -euo pipefail
strata=$1 root=$2 work=$3
mkdir -p "$work"
cd "$root"
export OMP_WAIT_POLICY=PASSIVE
python3 tools/demo_model/eval_requests.py "$work/requests.jsonl" "${STRATA_SPECULATIVE_EVERY:-1}"
for n in 0 3; do
  "$strata" generate --model models/demo --device "${STRATA_DEVICE:-cpu}" --input "$work/requests.jsonl" --output "$work/out.$n.jsonl" \
    --max-num-seqs 32 --speculative-tokens $n --summary "$work/summary.$n.json" 2> "$work/log.$n"
done
python3 - "$work" <<'PY'
import json, sys
sys.path.insert(0, "tools/demo_model")
from eval_requests import replies
work = sys.argv[1]
plain, spec = replies(f"{work}/out.0.jsonl"), replies(f"{work}/out.3.jsonl")
differ = [k for k in plain if spec.get(k) != plain[k]]
sp = json.load(open(f"{work}/summary.3.json"))["engine"]["speculative"]
print(f"speculative_demo: {len(plain) - len(differ)}/{len(plain)} replies equal; accepted {sp['accepted']} of "
      f"{sp['verified']} verified drafts in {sp['verify_steps']} verify steps")
for k in differ[:5]:
    print(f"  {k}: without {json.dumps(plain[k])[:200]}\n  {k}: with    {json.dumps(spec.get(k))[:200]}")
ok = not differ and sp["verify_steps"] >= len(plain) // 4 and sp["accepted"] > 0.8 * sp["verified"]
sys.exit(0 if ok else 1)
PY
