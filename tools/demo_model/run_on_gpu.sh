#!/usr/bin/env bash
# Builds Strata's demo model on the GPU machine, from the repository root, without network:
#   corpus (corpus.py) -> tokenizer (make_tokenizer.py) -> render self-test -> train.py (tokenize, preflight,
#   train for a wall-clock budget, export, evaluate, verify).
#
#   bash tools/demo_model/run_on_gpu.sh OUTDIR [--pack DIR] [--smoke] [corpus options] [train.py options]
#
# Needs two git-ignored inputs, so `carry` them to the device: .deps/reference/encoding_dsv4.py (the reference
# chat encoder) and .deps/tokenizer-deepseek_v3/ (scripts/fetch_test_data.sh). Writes OUTDIR/corpus/,
# OUTDIR/model/ (config.json, model.safetensors, tokenizer.json, tokenizer_config.json), summary.json,
# train_log.txt, train_log.jsonl, expected_greedy.jsonl.
#
# --pack DIR: also write DIR/demo_model.tgz.partNN (a tar.gz of the above minus the corpus, cut into 15 MiB
#             pieces, so it fits the device's limits on returned files); done even when a step fails, so the
#             logs come back. Reassemble with: cat DIR/demo_model.tgz.part* | tar xz -C DEST
# --smoke:    a 2-minute rehearsal of every step (small corpus, 30 s of training); the numbers mean nothing.
# --train-seed N, --task-weights SPEC, --suffix-none P, --extra-suffixes P, --free-phrasing P: go to corpus.py (the training split only; held-out lines
#             and the evaluation set stay those of --seed 0).
# --init-from DIR (train.py): start from an exported checkpoint folder, e.g. an earlier run's model/ carried as
#             .deps/demo_run3 (git-ignored); checked here before anything else runs.
# The whole run keeps within the device's 10-minute command limit: train.py shortens training if needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEMO_START=${DEMO_START:-$(date +%s)}  # a caller may fix the start (deadlines count from it)
export DEMO_START PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true

out=${1:?usage: run_on_gpu.sh OUTDIR [--pack DIR] [--smoke] [train.py options]}
shift
pack="" smoke=0 train_args=() corpus_args=() init_from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --pack) pack=${2:?--pack needs a folder}; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --train-seed|--task-weights|--suffix-none|--extra-suffixes|--free-phrasing) corpus_args+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --init-from) init_from=${2:?--init-from needs a folder}; train_args+=("$1" "$2"); shift 2 ;;
    *) train_args+=("$1"); shift ;;
  esac
done
mkdir -p "$out"

pack_results() {
  local rc=$?
  if [ -n "$pack" ]; then
    mkdir -p "$pack"
    local items=()
    for f in model summary.json train_log.txt train_log.jsonl expected_greedy.jsonl render_selftest.txt corpus/corpus_stats.json; do
      [ -e "$out/$f" ] && items+=("$f")
    done
    if [ ${#items[@]} -gt 0 ]; then
      tar -C "$out" -czf - "${items[@]}" | split -b 15m -d -a 2 - "$pack/demo_model.tgz.part"
      echo "packed ${items[*]} into:"; ls -l "$pack"
    fi
  fi
  echo "run_on_gpu.sh: exit $rc after $(( $(date +%s) - DEMO_START ))s"
}
trap pack_results EXIT

step() { echo "=== [$(( $(date +%s) - DEMO_START ))s] $*"; }

step "environment"
for f in .deps/reference/encoding_dsv4.py .deps/tokenizer-deepseek_v3/tokenizer.json tests/reference/chat_reference.py; do
  [ -f "$f" ] || { echo "missing $f (carry .deps/reference and .deps/tokenizer-deepseek_v3 to the device)"; exit 2; }
done
if [ -n "$init_from" ]; then
  for f in config.json model.safetensors; do
    [ -f "$init_from/$f" ] || { echo "missing $init_from/$f (carry the checkpoint folder given to --init-from)"; exit 2; }
  done
  ls -l "$init_from"
fi
# The Python check (imports take seconds) and the tokenizer run beside the corpus; both are waited for below.
python3 -c "import torch, transformers, tokenizers, safetensors; from transformers import DeepseekV4ForCausalLM; \
print('python ok: torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, \
'cuda', torch.cuda.is_available())" > "$out/python_check.txt" 2>&1 &
python_check=$!
python3 tools/demo_model/make_tokenizer.py --out "$out/model" > "$out/make_tokenizer.txt" 2>&1 &
make_tok=$!
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true

step "corpus"
if [ $smoke = 1 ]; then
  python3 tools/demo_model/corpus.py --out "$out/corpus" --train-lines 4000 --heldout-lines 300 "${corpus_args[@]}" > /dev/null
  train_args=(--minutes 0.5 --eval-every-s 15 --eval-lines 16 --verify-lines 8 "${train_args[@]}")
else
  python3 tools/demo_model/corpus.py --out "$out/corpus" "${corpus_args[@]}" > /dev/null
fi
cat "$out/corpus/corpus_stats.json"

step "tokenizer"
wait $make_tok || { cat "$out/make_tokenizer.txt"; exit 2; }
cat "$out/make_tokenizer.txt"
wait $python_check || { cat "$out/python_check.txt"; exit 2; }
cat "$out/python_check.txt"

step "render self-test (reference encoder, request mapping, piece split, reference parser)"
python3 tools/demo_model/render.py selftest --in "$out/corpus/heldout_eval.jsonl" > "$out/render_selftest.txt"
tail -2 "$out/render_selftest.txt"

step "train.py ${train_args[*]}"
set -o pipefail
python3 tools/demo_model/train.py --corpus "$out/corpus" --tokenizer-dir "$out/model" --out "$out" "${train_args[@]}" \
  2>&1 | grep --line-buffered -v "^Writing model shards" | tee "$out/train_log.txt"
