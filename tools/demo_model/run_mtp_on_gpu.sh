#!/usr/bin/env bash
# Trains the demo model's MTP draft layer on the GPU machine, from the repository root, without network:
#   corpus (corpus.py, the committed model's training-split options) -> train_mtp.py (tokenize, load models/demo
#   frozen, train the MTP layer for a wall-clock budget, evaluate acceptance, export, verify the export).
#
#   bash tools/demo_model/run_mtp_on_gpu.sh OUTDIR [--smoke] [--train-lines N] [corpus options] [train_mtp.py options]
#
# Needs one git-ignored input, so `carry` it to the device: .deps/reference/encoding_dsv4.py (the reference chat
# encoder). The main model and its tokenizer are models/demo/ of the working tree. Everything ends within
# --deadline-minutes (default 5.6) of the start; the corpus is written outside OUTDIR ($MTP_WORK, default
# /tmp/mtp_work). OUTDIR gets (all small, nothing to unpack):
#   model_update/       mtp.safetensors, model.safetensors.index.json, config.json: copy them into models/demo/
#   mtp_report.json     acceptance (greedy, on the CI set; teacher-forced, on heldout.jsonl), top-1, timings
#   mtp_verify.json     the export read back through tests/gpu/mtp_reference.py
#   mtp_strata_check.json  expected draft logits for `check_strata.py mtp` (strata model mtp-logits)
#   mtp_train_log.txt, mtp_train_log.jsonl, corpus_stats.json, python_check.txt
# --smoke: a ~1.5-minute rehearsal of every step (small corpus, 20 s of training); the numbers mean nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEMO_START=${DEMO_START:-$(date +%s)}  # a caller may fix the start (deadlines count from it)
export DEMO_START PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true

out=${1:?usage: run_mtp_on_gpu.sh OUTDIR [--smoke] [--train-lines N] [corpus options] [train_mtp.py options]}
shift
work=${MTP_WORK:-/tmp/mtp_work}
smoke=0 train_lines=150000 train_args=()
# The committed model's (seventh run's) training-split options; later ones given here override them.
corpus_args=(--train-seed 3 --free-phrasing 0.6 --task-weights add=0.28,sub=0.34,mul=0.18,capital=0.10,unit=0.10
             --suffix-none 0.25 --extra-suffixes 0.5)
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1; shift ;;
    --train-lines) train_lines=${2:?--train-lines needs a value}; shift 2 ;;
    --train-seed|--task-weights|--suffix-none|--extra-suffixes|--free-phrasing) corpus_args+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    *) train_args+=("$1"); shift ;;
  esac
done
mkdir -p "$out" "$work"
trap 'echo "run_mtp_on_gpu.sh: exit $? after $(( $(date +%s) - DEMO_START ))s"' EXIT
step() { echo "=== [$(( $(date +%s) - DEMO_START ))s] $*"; }

step "environment"
for f in .deps/reference/encoding_dsv4.py tests/reference/chat_reference.py tests/gpu/mtp_reference.py \
         models/demo/config.json models/demo/model.safetensors models/demo/tokenizer.json; do
  [ -f "$f" ] || { echo "missing $f (carry .deps/reference to the device; models/demo/ comes with the tree)"; exit 2; }
done
if [ -e models/demo/mtp.safetensors ] || [ -e models/demo/model.safetensors.index.json ]; then
  echo "models/demo/ already has an MTP layer (mtp.safetensors / model.safetensors.index.json); this trains one for the main model alone"
  exit 2
fi
sha256sum models/demo/model.safetensors models/demo/config.json
python3 -c "import torch, transformers, tokenizers, safetensors; from transformers import DeepseekV4ForCausalLM; \
print('python ok: torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, \
'cuda', torch.cuda.is_available())" > "$out/python_check.txt" 2>&1 &
python_check=$!
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true

[ $smoke = 1 ] && train_lines=4000
step "corpus (${train_lines} training lines: ${corpus_args[*]})"
if [ $smoke = 1 ]; then
  python3 tools/demo_model/corpus.py --out "$work/corpus" --train-lines 4000 --heldout-lines 300 "${corpus_args[@]}" > /dev/null
  train_args=(--minutes 0.33 --eval-every-s 10 --eval-sample 64 "${train_args[@]}")
else
  python3 tools/demo_model/corpus.py --out "$work/corpus" --train-lines "$train_lines" "${corpus_args[@]}" > /dev/null
fi
cp "$work/corpus/corpus_stats.json" "$out/"
cmp -s "$work/corpus/heldout_eval.jsonl" models/demo/heldout_eval.jsonl \
  && echo "heldout_eval.jsonl: identical to models/demo/heldout_eval.jsonl" \
  || echo "WARNING: heldout_eval.jsonl differs from models/demo/heldout_eval.jsonl"
wait $python_check || { cat "$out/python_check.txt"; exit 2; }
cat "$out/python_check.txt"

step "train_mtp.py ${train_args[*]}"
python3 tools/demo_model/train_mtp.py --corpus "$work/corpus" --model models/demo --out "$out" "${train_args[@]}" \
  2>&1 | tee "$out/mtp_train_log.txt"
ls -l "$out" "$out/model_update"
