#!/usr/bin/env bash
# Structured outputs' cost in the engine on the CPU (the demo model, models/demo/): `strata generate --input` runs
# 64 chat requests (the same prompts) at --max-num-seqs 64, up to 64 tokens each, temperature 1, once unconstrained
# and once per grammar given through structured_outputs (which, unlike response_format, leaves the prompt as is):
#   none         no grammar (ignore_eos: every request generates all 64 tokens);
#   json_schema  structured_outputs.json (an object with a bounded string, an integer, an enum, an array);
#   regex        structured_outputs.regex: lower-case words ending in a full stop ([a-z ,]+\.);
#   tool_auto    tools with tool_choice auto (the DSML call grammar over every token; the prompt lists the tool).
# Per kind (the fastest of three interleaved rounds): generated tokens/s over the wall time (grammar compilation included) and over the engine's steps alone,
# the model's time per step and the engine's own, and the masks built on the engine thread with their mean cost per
# constrained token (EngineStats). Writes bench/results/structured_outputs_cpu_demo.json.
# Usage (repo root, after scripts/setup.sh): bash bench/run_structured_cpu.sh [BUILD_DIR] [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-bench/results/structured_outputs_cpu_demo.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
commit=${COMMIT:-$(bash scripts/provenance.sh --commit)}
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
schema = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"},
    "mood": {"enum": ["calm", "busy", "tired"]}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}}},
    "required": ["name", "age", "mood"]}
tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object",
          "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}]
kinds = {
    "none": {"ignore_eos": True},
    "json_schema": {"structured_outputs": {"json": schema}},
    "regex": {"structured_outputs": {"regex": "[a-z ,]+\\."}},
    "tool_auto": {"tools": tools, "tool_choice": "auto"},
}
for kind, extra in kinds.items():
    with open(f"{work}/{kind}.jsonl", "w") as f:
        for i in range(64):
            body = {"custom_id": i, "messages": [{"role": "user", "content": f"Tell me about person number {i}."}],
                    "max_tokens": 64, "temperature": 1.0, "seed": i}
            body.update(extra)
            f.write(json.dumps(body) + "\n")
PY
# Three rounds, the kinds interleaved, so load from elsewhere on the machine falls on all of them; each kind's
# fastest round (by tokens per second of engine steps) is reported, with every round's figure beside it.
for round in 1 2 3; do
  for kind in none json_schema regex tool_auto; do
    "$build/strata" generate --input "$work/$kind.jsonl" --output "$work/$kind.out.jsonl" --max-num-seqs 64 \
      --summary "$work/$kind.summary.$round.json" 2> "$work/$kind.log"
  done
done
python3 - "$work" "$out" "$commit" <<'PY'
import json, subprocess, sys
work, out, commit = sys.argv[1:]
result = {"benchmark": "structured_outputs_engine_cpu", "commit": commit,
          "date": subprocess.run(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"], capture_output=True, text=True).stdout.strip(),
          "device": subprocess.run(["bash", "scripts/provenance.sh"], capture_output=True, text=True).stdout.strip(),
          "config": {"model": "models/demo", "requests": 64, "max_num_seqs": 64, "max_tokens": 64, "temperature": 1.0,
                     "omp_num_threads": __import__("os").environ.get("OMP_NUM_THREADS", "all cores"),
                     "load_average_1m_before": float(open("/proc/loadavg").read().split()[0])},
          "runs": {}}
for kind in ["none", "json_schema", "regex", "tool_auto"]:
    rounds = [json.load(open(f"{work}/{kind}.summary.{r}.json")) for r in (1, 2, 3)]
    rate = lambda x: x["generated_tokens"] / x["engine"]["step_seconds"]
    s = max(rounds, key=rate)
    e = s["engine"]
    ok = sum(1 for l in open(f"{work}/{kind}.out.jsonl") if json.loads(l)["response"]["status_code"] == 200)
    result["runs"][kind] = {"succeeded": ok, "generated_tokens": s["generated_tokens"],
                            "generated_tokens_per_s": s["generated_tokens_per_s"], "wall_s": s["wall_s"],
                            "steps": e["steps"], "step_seconds": e["step_seconds"],
                            "generated_tokens_per_step_s": s["generated_tokens"] / e["step_seconds"],
                            "model_ms_per_step": 1e3 * e["model_seconds"] / e["steps"],
                            "outside_model_us_per_step": e["outside_model_us_per_step"],
                            "grammar_masks": e["grammar_masks"], "grammar_mask_us_per_token": e["grammar_mask_us_per_token"],
                            "generated_tokens_per_step_s_all_rounds": [rate(x) for x in rounds],
                            "grammar_mask_us_per_token_all_rounds": [x["engine"]["grammar_mask_us_per_token"] for x in rounds]}
base = result["runs"]["none"]["generated_tokens_per_step_s"]
for kind, r in result["runs"].items():
    r["step_tokens_per_s_vs_none"] = r["generated_tokens_per_step_s"] / base if base else 0.0
json.dump(result, open(out, "w"), indent=2)
print(json.dumps(result["runs"], indent=2))
PY
