#!/usr/bin/env bash
# Compiles every CUDA source of the backend for Blackwell (sm_100a) with warnings as errors: the issue's
# "Blackwell compiled" check. Not part of CI (which builds sm_90a only, to stay fast on two cores); run it after
# touching src/backend/cuda/*.cu. Usage: bash scripts/check_sm100.sh
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in src/backend/cuda/*.cu; do
  "$nvcc" -std=c++17 -O3 -Isrc -DSTRATA_WITH_CUDA=1 -gencode=arch=compute_100a,code=sm_100a \
    --Werror=all-warnings -Xcompiler=-Wall,-Wextra -c "$f" -o "$out/$(basename "$f").o"
  echo "sm_100a ok: $f"
done
