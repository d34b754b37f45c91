#!/usr/bin/env bash
# `strata serve --device cuda` under load, on the GPU machine: the whole serving path (HTTP, engine, CUDA forward)
# driven by `strata bench serve`. Writes one JSON per load shape into OUT_DIR (serve_cuda_<shape>.json).
#
# Model: `strata model init --preset small --tokenizer-from .deps/tokenizer-deepseek_v3` — the small preset's
# shapes (8 layers: sliding, CSA and HCA attention, hash and top-k MoE; hidden 512) with random weights and the
# DeepSeek tokenizer plus V4's added tokens (vocabulary 129280), so prompts, detokenization and streaming are those
# of a real checkpoint while the model itself stays small: what is measured is serving on the GPU, not a large
# model's FLOPs. Requests stream /v1/completions with random token-id prompts and ignore_eos.
# Shapes: "c64" (64 concurrent, 512-token prompts, 128 generated) and "c256" (256 concurrent, 128 + 128).
#
# Usage (repo root; carry .deps/tokenizer-deepseek_v3): bash bench/run_serve_cuda.sh STRATA_BINARY OUT_DIR [COMMIT]
set -euo pipefail
strata=${1:?usage: run_serve_cuda.sh STRATA_BINARY OUT_DIR [COMMIT]}
out=${2:?usage: run_serve_cuda.sh STRATA_BINARY OUT_DIR [COMMIT]}
# COMMIT: default scripts/provenance.sh --commit (STRATA_COMMIT on a machine without .git; "-dirty" when it was).
commit=${3:-$(bash "$(dirname "$0")/../scripts/provenance.sh" --commit)}
port=${PORT:-18123}
work=$(mktemp -d)
mkdir -p "$out"
"$strata" model init --preset small --seed 0 --dtype bf16 --tokenizer-from .deps/tokenizer-deepseek_v3 \
  --out "$work/small" > /dev/null

"$strata" serve --model "$work/small" --device cuda --port "$port" --max-num-seqs 256 \
  --max-num-batched-tokens 8192 --max-model-len 4096 > "$out/serve_cuda_server.log" 2>&1 &
server=$!
cleanup() {
  kill -TERM "$server" 2> /dev/null || true
  wait "$server" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
get() { python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" "$1"; }
for _ in $(seq 1 120); do
  get "http://127.0.0.1:$port/health" > /dev/null 2>&1 && break
  kill -0 "$server" 2> /dev/null || { echo "the server exited:"; tail -20 "$out/serve_cuda_server.log"; exit 1; }
  sleep 0.5
done

run() {  # NAME CONCURRENCY PROMPTS INPUT_LEN OUTPUT_LEN
  "$strata" bench serve --url "http://127.0.0.1:$port" --concurrency "$2" --num-prompts "$3" --input-len "$4" \
    --output-len "$5" --token-ids 1000:30000 --warmup "$2" --slo-ttft-ms 1000 --slo-tpot-ms 50 --commit "$commit" \
    --label "strata serve --device cuda --max-num-seqs 256 --max-num-batched-tokens 8192; model: small preset, random bf16 weights, DeepSeek tokenizer (vocab 129280)" \
    --out "$out/serve_cuda_$1.json"
}
run c64 64 512 512 128
run c256 256 1024 128 128
# The server must still be healthy, with nothing left running, after the load.
get "http://127.0.0.1:$port/metrics" | grep -E "^strata_(num_requests_running|num_requests_waiting|state_pool_used_blocks|state_pool_used_slots|engine_steps_total|generation_tokens_total)[{ ]"
