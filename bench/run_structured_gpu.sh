#!/usr/bin/env bash
# Structured outputs' cost in the engine on one GPU (issue 16: "decode throughput at batch 64 with every row
# constrained: ≤ 5% below unconstrained"). `strata generate --input --device cuda` runs 64 chat requests (the same
# prompts, seeds 0-63) at --max-num-seqs 64, up to MAX_TOKENS (default 128) tokens each, temperature 1, once per kind:
#   none         no grammar (ignore_eos: every request generates all its tokens);
#   json_schema  structured_outputs.json: an object with a bounded string, an integer, an enum, then a "story"
#                string whose pattern lets it end only with ";;";
#   regex        structured_outputs.regex: words and punctuation, ended by ";;";
#   ebnf         structured_outputs.grammar: a list of "- word word ..." lines, ended by ";;".
# The rare ";;" ending keeps every row constrained and decoding for all its tokens, so each constrained run is a
# batch of 64 constrained rows throughout, as the unconstrained one is a batch of 64 free rows (rows that still end
# early are counted: finished_before_max_tokens, rows_per_step).
# Models: "demo" (models/demo, the trained demo model: hidden 192, 4 layers, vocabulary 129,280 — a short step, the
# hardest case for hiding the masks) and "flash" (random weights of V4-Flash's layer shapes, FLASH_LAYERS layers,
# default 2, in FP8, with the DeepSeek tokenizer: `strata model init --preset flash --dtype fp8` written to $WORK,
# ~8 GB a layer; served with --precision fp8).
# Per model and kind (the fastest of ROUNDS=3 interleaved rounds by generated tokens per second of engine steps, every
# round's figure beside it): tokens/s over the engine's steps, step time, the model runner's time per step and the
# engine's own, masks built with their cost, and the part of the mask time the device hid (EngineStats).
# Writes OUT_DIR/structured_outputs_h200_<model>.json (device, date, commit, config) and progress logs
# (OUT_DIR/progress.log, one log per run under OUT_DIR/logs/).
#
# Usage (repo root on the GPU machine; carry .deps/include, .deps/pcre2, .deps/xxhash, .deps/debs and, for the flash
# model, .deps/tokenizer-deepseek_v3 — what tests/gpu/run.sh carries, plus the tokenizer):
#   STRATA_COMMIT=<commit> bash bench/run_structured_gpu.sh OUT_DIR [COMMIT]
# Environment: MODELS="demo flash" (which models), ROUNDS=3, MAX_TOKENS=128, FLASH_LAYERS=2, STRATA=<a strata
# binary built with CUDA> to skip the build (default: build-gpu/strata, built here with tests/gpu/run.sh's cmake line),
# WORK=<scratch directory> (default: a temporary one, removed at exit); DEVICE=cpu with STRATA=build/strata
# MODELS=demo MAX_TOKENS=8 ROUNDS=1 smoke-tests the script itself on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/run_structured_gpu.sh OUT_DIR [COMMIT]}
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
commit=${2:-$(bash scripts/provenance.sh --commit)}
models=${MODELS:-demo flash}
rounds=${ROUNDS:-3}
max_tokens=${MAX_TOKENS:-128}
flash_layers=${FLASH_LAYERS:-2}
device=${DEVICE:-cuda}
if [ -n "${WORK:-}" ]; then
  work=$WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$out/progress.log"; }

log "run_structured_gpu.sh: models '$models', $rounds rounds, $max_tokens tokens, commit $commit, work $work"
bash scripts/provenance.sh | tee -a "$out/progress.log"

# The binary: tests/gpu/run.sh's build (Boost's headers from .deps/debs, so the server parts build as well).
strata=${STRATA:-}
if [ -z "$strata" ]; then
  for deb in .deps/debs/libboost*.deb; do
    if [ -f "$deb" ] && [ ! -f .deps/boost/usr/include/boost/beast.hpp ]; then dpkg -x "$deb" .deps/boost; fi
  done
  log "building build-gpu/strata (log: $out/logs/build.log)"
  { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_TESTS=OFF -DSTRATA_CUDA=on \
      -DSTRATA_CUDA_ARCHITECTURES=90a && ninja -C build-gpu strata; } > "$out/logs/build.log" 2>&1 \
    || { tail -40 "$out/logs/build.log"; log "build failed"; exit 1; }
  strata=build-gpu/strata
  log "built"
fi
[ -x "$strata" ] || { log "no strata binary at $strata"; exit 1; }
if [ "$device" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$out/progress.log"
fi

# The requests of each kind.
python3 - "$work" "$max_tokens" <<'PY'
import json, sys
work, max_tokens = sys.argv[1], int(sys.argv[2])
schema = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"},
    "mood": {"enum": ["calm", "busy", "tired"]},
    "story": {"type": "string", "pattern": "^[a-z ,.]+;;$"}},
    "required": ["name", "age", "mood", "story"]}
ebnf = r'''root ::= line+ ";;"
line ::= "- " word (" " word)* "\n"
word ::= [a-z]+ | [A-Z] [a-z]*'''
kinds = {
    "none": {"ignore_eos": True},
    "json_schema": {"structured_outputs": {"json": schema}},
    "regex": {"structured_outputs": {"regex": "[A-Za-z ,.!?]+;;"}},
    "ebnf": {"structured_outputs": {"grammar": ebnf}},
}
for kind, extra in kinds.items():
    with open(f"{work}/{kind}.jsonl", "w") as f:
        for i in range(64):
            body = {"custom_id": i, "messages": [{"role": "user", "content": f"Tell me about person number {i}."}],
                    "max_tokens": max_tokens, "temperature": 1.0, "seed": i}
            body.update(extra)
            f.write(json.dumps(body) + "\n")
PY

# The flash model, made here (random weights, FP8, the DeepSeek tokenizer).
model_dir() {
  case "$1" in
    demo) echo models/demo ;;
    flash) echo "$work/flash$flash_layers" ;;
    *) log "unknown model '$1' (expected demo or flash)"; exit 1 ;;
  esac
}
for model in $models; do
  if [ "$model" = flash ] && [ ! -f "$work/flash$flash_layers/config.json" ]; then
    [ -f .deps/tokenizer-deepseek_v3/tokenizer.json ] || { log "flash needs .deps/tokenizer-deepseek_v3 (carry it)"; exit 1; }
    log "writing the flash model ($flash_layers layers, fp8) to $work/flash$flash_layers"
    t0=$(date +%s)
    "$strata" model init --preset flash --layers "$flash_layers" --dtype fp8 --seed 0 \
      --tokenizer-from .deps/tokenizer-deepseek_v3 --out "$work/flash$flash_layers" > "$out/logs/flash_init.log" 2>&1 \
      || { tail -20 "$out/logs/flash_init.log"; log "model init failed"; exit 1; }
    log "flash model written in $(( $(date +%s) - t0 )) s ($(du -sh "$work/flash$flash_layers" | cut -f1))"
  fi
done

# Rounds, the kinds interleaved, so whatever else runs on the machine falls on all of them.
for model in $models; do
  dir=$(model_dir "$model")
  extra=(--device "$device")
  [ "$model" = flash ] && extra+=(--precision fp8)
  for round in $(seq 1 "$rounds"); do
    for kind in none json_schema regex ebnf; do
      t0=$(date +%s.%N)
      if ! "$strata" generate --model "$dir" "${extra[@]}" --input "$work/$kind.jsonl" \
          --output "$work/$model.$kind.out.$round.jsonl" --max-num-seqs 64 --max-model-len 1024 \
          --summary "$work/$model.$kind.summary.$round.json" > "$out/logs/$model.$kind.$round.log" 2>&1; then
        tail -20 "$out/logs/$model.$kind.$round.log"
        log "$model $kind round $round failed"
        exit 1
      fi
      cp "$work/$model.$kind.summary.$round.json" "$out/logs/"
      log "$model $kind round $round: $(python3 -c "
import json, sys
s = json.load(open(sys.argv[1])); e = s['engine']; steps = max(e['steps'], 1); t = max(e['step_seconds'], 1e-12)
print(f\"{s['succeeded']} ok, {s['failed']} failed; {s['generated_tokens']} tokens in {e['steps']} steps, {s['generated_tokens'] / t:.0f} tok/s over steps, \"
      f\"{1e3 * e['step_seconds'] / steps:.3f} ms/step, masks {e['grammar_masks']} \"
      f\"({1e3 * e['grammar_mask_seconds'] / steps:.3f} ms/step, hidden {e.get('grammar_mask_hidden_seconds', 0.0):.4f} s)\")
" "$work/$model.$kind.summary.$round.json") ($(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s)"
    done
  done
  cp "$work/$model.json_schema.out.1.jsonl" "$out/logs/$model.json_schema.sample_outputs.jsonl"

  python3 - "$work" "$out" "$commit" "$model" "$dir" "$rounds" "$max_tokens" "$flash_layers" <<'PY'
import json, os, subprocess, sys
work, out, commit, model, model_dir, rounds, max_tokens, flash_layers = sys.argv[1:]
rounds, max_tokens = int(rounds), int(max_tokens)
prov = dict(line.split(": ", 1) for line in subprocess.run(["bash", "scripts/provenance.sh"], capture_output=True,
                                                             text=True).stdout.strip().splitlines())
result = {"benchmark": "structured_outputs_engine_gpu", "device": prov["device"], "date": prov["date"],
          "commit": commit,
          "config": {"model": model_dir if model == "demo" else
                     f"random flash preset, {flash_layers} layers, fp8 (strata model init --preset flash "
                     f"--layers {flash_layers} --dtype fp8 --tokenizer-from .deps/tokenizer-deepseek_v3)",
                     "backend": os.environ.get("DEVICE", "cuda"), "precision": "bf16" if model == "demo" else "fp8",
                     "requests": 64, "max_num_seqs": 64, "max_tokens": max_tokens, "temperature": 1.0,
                     "rounds": rounds, "kinds": {"none": "no grammar, ignore_eos",
                                                 "json_schema": "object: name ≤ 24, integer age, enum mood, story "
                                                                "string ^[a-z ,.]+;;$",
                                                 "regex": "[A-Za-z ,.!?]+;;",
                                                 "ebnf": "lines of '- word word ...', then ';;'"},
                     "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "all cores"), "nproc": os.cpu_count(),
                     "load_average_1m_before": float(open("/proc/loadavg").read().split()[0])},
          "runs": {}}
for kind in ["none", "json_schema", "regex", "ebnf"]:
    summaries = [json.load(open(f"{work}/{model}.{kind}.summary.{r}.json")) for r in range(1, rounds + 1)]
    rate = lambda s: s["generated_tokens"] / s["engine"]["step_seconds"] if s["engine"]["step_seconds"] > 0 else 0.0
    best = max(range(rounds), key=lambda r: rate(summaries[r]))
    if rate(summaries[best]) == 0:
        # Every round's requests failed (a grammar over its compile-time cap on a loaded machine, say): the run
        # logs say why.
        result["runs"][kind] = {"error": "every round failed", "failed": [x["failed"] for x in summaries]}
        print(f"WARNING: {model} {kind}: every round failed (see {out}/logs/{model}.{kind}.*.log)")
        continue
    s, e = summaries[best], summaries[best]["engine"]
    finished_early = ok = 0
    for line in open(f"{work}/{model}.{kind}.out.{best + 1}.jsonl"):
        r = json.loads(line)
        if r["response"]["status_code"] != 200:
            continue
        ok += 1
        finished_early += sum(1 for c in r["response"]["body"]["choices"] if c["finish_reason"] != "length")
    # Seeded requests: every round should produce the same outputs (a check that the late masks change nothing
    # from run to run; the masks depend only on each sequence's own tokens).
    def outputs(r):
        return [json.dumps(json.loads(line)["response"]["body"].get("choices"), sort_keys=True)
                for line in open(f"{work}/{model}.{kind}.out.{r}.jsonl")]
    same_outputs = all(outputs(r) == outputs(1) for r in range(2, rounds + 1))
    steps = e["steps"]
    result["runs"][kind] = {
        "same_outputs_all_rounds": same_outputs,
        "succeeded": ok, "finished_before_max_tokens": finished_early, "generated_tokens": s["generated_tokens"],
        "steps": steps, "rows_per_step": s["generated_tokens"] / steps, "wall_s": s["wall_s"],
        "step_seconds": e["step_seconds"], "generated_tokens_per_step_s": rate(s),
        "step_ms": 1e3 * e["step_seconds"] / steps, "model_ms_per_step": 1e3 * e["model_seconds"] / steps,
        "outside_model_us_per_step": e["outside_model_us_per_step"],
        "grammar_masks": e["grammar_masks"], "grammar_mask_us_per_token": e["grammar_mask_us_per_token"],
        "grammar_mask_ms_per_step": 1e3 * e["grammar_mask_seconds"] / steps,
        "grammar_mask_hidden_fraction": (e.get("grammar_mask_hidden_seconds", 0.0) / e["grammar_mask_seconds"]
                                         if e["grammar_mask_seconds"] > 0 else 0.0),
        "generated_tokens_per_step_s_all_rounds": [rate(x) for x in summaries],
        "step_ms_all_rounds": [1e3 * x["engine"]["step_seconds"] / max(x["engine"]["steps"], 1) for x in summaries]}
runs = {k: r for k, r in result["runs"].items() if "error" not in r}
for kind, r in runs.items():
    if r["succeeded"] < 64:
        print(f"WARNING: {model} {kind}: only {r['succeeded']} of 64 requests succeeded (see the run logs)")
base = runs.get("none")
for kind, r in runs.items():
    if base:
        r["step_tokens_per_s_vs_none"] = r["generated_tokens_per_step_s"] / base["generated_tokens_per_step_s"]
        r["step_ms_vs_none"] = r["step_ms"] / base["step_ms"]
path = f"{out}/structured_outputs_h200_{model}.json"
json.dump(result, open(path, "w"), indent=2)
print(path)
print(json.dumps({k: {x: v.get(x) for x in ("same_outputs_all_rounds", "finished_before_max_tokens", "rows_per_step", "generated_tokens_per_step_s",
                                        "step_ms", "grammar_mask_ms_per_step", "grammar_mask_hidden_fraction",
                                        "step_tokens_per_s_vs_none", "error")} for k, v in result["runs"].items()}, indent=1))
PY
  log "$model done: $out/structured_outputs_h200_$model.json"
done
log "all done"
