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
ninja -C build-gpu strata strata_gpu_checks strata_gpu_model_check strata_gpu_invariance_check > "$out/gpu_build.log" 2>&1 || { tail -60 "$out/gpu_build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
status=0
{ bash scripts/provenance.sh; ./build-gpu/strata_gpu_checks; } | tee "$out/gpu_checks.txt" || status=1
rm -rf /tmp/strata-gpu-tiny /tmp/strata-gpu-tiny-mtp
./build-gpu/strata model init --preset tiny --dtype bf16 --seed 7 --out /tmp/strata-gpu-tiny > /dev/null
# With an MTP layer (docs/mtp.md): the model check adds the CUDA draft step against the CPU's on it.
./build-gpu/strata model init --preset tiny --dtype bf16 --mtp 1 --seed 3 --out /tmp/strata-gpu-tiny-mtp > /dev/null
{ bash scripts/provenance.sh; ./build-gpu/strata_gpu_model_check tests/fixtures/a_hc4 tests/fixtures/c_short /tmp/strata-gpu-tiny \
    /tmp/strata-gpu-tiny-mtp; } | tee "$out/gpu_model_check.txt" || status=1
# --batch-invariant (docs/batch_invariance.md): 1,000 random mixes per checkpoint, every logits row equal to the
# solo run's bits; an FP8 checkpoint in bf16 and fp8.
rm -rf /tmp/strata-gpu-tiny-fp8
./build-gpu/strata model init --preset tiny --dtype fp8 --seed 5 --out /tmp/strata-gpu-tiny-fp8 > /dev/null
{ bash scripts/provenance.sh; ./build-gpu/strata_gpu_invariance_check /tmp/strata-gpu-tiny /tmp/strata-gpu-tiny-fp8 models/demo; } \
  | tee "$out/gpu_invariance_check.txt" || status=1
# The MTP layer against PyTorch (tests/gpu/mtp_reference.py, DeepSeek's MTPBlock written independently): Strata's
# CPU and CUDA (fp32) draft logits of 10 tokens in one step, and of 200 tokens in chunks of 64 (the MTP ring of 128
# rows wraps), each recomputed in fp32 torch from the dumped main-model streams.
mtp_tokens=5,17,300,2,9,41,77,128,3,260
long_tokens=$(python3 -c 'print(",".join(str((i * 7919 + 17) % 512) for i in range(200)))')
{
  bash scripts/provenance.sh
  for device in cpu cuda; do
    for case in "short:$mtp_tokens:9" "long:$long_tokens:64"; do
      IFS=: read -r label tokens chunk <<< "$case"
      echo "== mtp_reference: $label tokens, strata --device $device --precision fp32 --chunk $chunk"
      ./build-gpu/strata model mtp-logits --model /tmp/strata-gpu-tiny-mtp --tokens "$tokens" --chunk "$chunk" \
        --device "$device" --precision fp32 --out "$out/strata_mtp_${label}_$device.json" \
        && python3 tests/gpu/mtp_reference.py --model /tmp/strata-gpu-tiny-mtp --strata "$out/strata_mtp_${label}_$device.json" \
          --out "$out/torch_mtp_${label}_$device.json" 2>&1 || echo "FAIL: mtp_reference $label $device"
    done
  done
} 2>&1 | tee "$out/gpu_mtp_reference.txt"
grep -q "^FAIL" "$out/gpu_mtp_reference.txt" && status=1
# DeepSeek's own numerics (docs/official_numerics.md): the PyTorch oracle on the release's layout, whose output is the
# CPU test's fixture (tests/fixtures/official/, compared by tests/official_oracle_test.cpp); both KV switch settings.
rm -rf /tmp/strata-official-small
./build-gpu/strata model init --preset small --layers 4 --dtype fp4 --seed 3 --out /tmp/strata-official-small > /dev/null
for kv in on off; do
  python3 tests/gpu/official_reference.py --model /tmp/strata-official-small --prompt-len 160 --decode 8 \
    --kv-fp8-rounds $kv --out "$out/official_small4_fp4_seed3_kv_$kv.json" || status=1
done
# The oracle's own drift: the same numerics with the mHC's fp32 sums done in float64, fed the same tokens, compared
# as the CPU test compares Strata (the yardstick for that test's bounds).
python3 tests/gpu/official_reference.py --model /tmp/strata-official-small --prompt-len 160 --decode 8 --mhc-sums float64 \
  --full-logits --force-tokens "$out/official_small4_fp4_seed3_kv_on.json" --out /tmp/strata-official-f64.json &&
  python3 tests/gpu/compare_official.py "$out/official_small4_fp4_seed3_kv_on.json" /tmp/strata-official-f64.json \
    > "$out/official_drift_mhc_float64.json" || status=1
exit $status
