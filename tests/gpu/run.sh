#!/usr/bin/env bash
# Builds the CUDA backend on the GPU machine and checks it against the CPU reference: every op on fresh random
# inputs (strata_gpu_checks), then the whole model (strata_gpu_model_check) on the transformers parity fixtures
# and a random tiny preset. Usage (repo root, carrying .deps/include, .deps/pcre2, .deps/xxhash and, for the server,
# .deps/debs — all made by scripts/device_deps.sh):
#   STRATA_COMMIT=$(bash scripts/provenance.sh --commit) bash tests/gpu/run.sh [OUTDIR]
# (run the $(…) where the tree is a git checkout: the GPU machine's copy has no .git). Each output file starts with
# the device, date and commit (scripts/provenance.sh), "-dirty" when the tree had uncommitted changes.
set -euo pipefail
out=${1:-/tmp}
# Boost's headers travel as Debian's .deb (scripts/device_deps.sh): unpacked here, CMake finds them in .deps/boost
# and builds the server (strata serve, strata bench serve) as well.
for deb in .deps/debs/libboost*.deb; do
  if [ -f "$deb" ] && [ ! -f .deps/boost/usr/include/boost/beast.hpp ]; then dpkg -x "$deb" .deps/boost; fi
done
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_TESTS=OFF -DSTRATA_CUDA=on \
  -DSTRATA_CUDA_ARCHITECTURES=90a > "$out/gpu_cmake.log" 2>&1 || { tail -30 "$out/gpu_cmake.log"; exit 1; }
ninja -C build-gpu strata strata_gpu_checks strata_gpu_model_check > "$out/gpu_build.log" 2>&1 || { tail -60 "$out/gpu_build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
{ bash scripts/provenance.sh; ./build-gpu/strata_gpu_checks; } | tee "$out/gpu_checks.txt" || status=1
rm -rf /tmp/strata-gpu-tiny
./build-gpu/strata model init --preset tiny --dtype bf16 --seed 7 --out /tmp/strata-gpu-tiny > /dev/null
{ bash scripts/provenance.sh; ./build-gpu/strata_gpu_model_check tests/fixtures/a_hc4 tests/fixtures/c_short /tmp/strata-gpu-tiny; } \
  | tee "$out/gpu_model_check.txt" || status=1
exit $status
