#!/usr/bin/env bash
# Builds strata on the GPU machine and runs the transformers parity check. Usage (repo root):
#   STRATA_COMMIT=$(bash scripts/provenance.sh --commit) bash tests/reference/run_parity.sh OUTDIR [extra parity.py args]
# (the $(…) where the tree is a git checkout). parity.txt starts with the device, date and commit of the run.
set -euo pipefail
out=${1:?output folder}; shift
cmake -S . -B build-ref -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_TESTS=OFF > "$out/cmake.log" 2>&1
ninja -C build-ref strata > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
{ bash scripts/provenance.sh; PYTHONUNBUFFERED=1 python3 tests/reference/parity.py --strata build-ref/strata --work /tmp/parity "$@" 2>&1; } \
  | grep -v "Writing model" | tee "$out/parity.txt"
