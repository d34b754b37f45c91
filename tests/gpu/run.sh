#!/usr/bin/env bash
# Builds the CUDA backend on the GPU machine and runs its checks against the CPU ops. Usage (repo root, carrying
# .deps for nlohmann-json and PCRE2): bash tests/gpu/run.sh [OUTDIR]
set -euo pipefail
out=${1:-/tmp}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_TESTS=OFF -DSTRATA_CUDA=on \
  -DSTRATA_CUDA_ARCHITECTURES=90a > "$out/gpu_cmake.log" 2>&1 || { tail -30 "$out/gpu_cmake.log"; exit 1; }
ninja -C build-gpu strata strata_gpu_checks > "$out/gpu_build.log" 2>&1 || { tail -60 "$out/gpu_build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
./build-gpu/strata_gpu_checks | tee "$out/gpu_checks.txt"
