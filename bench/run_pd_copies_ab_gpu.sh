#!/usr/bin/env bash
# The A/B of bench/results/pd_copies_ab_h100.json (docs/disaggregation.md "Why the shared path used to lose"): the PD
# benchmark (bench/run_pd_gpu.sh) with this tree's state copies (a snapshot layer's runs in one launch on the step stream),
# then with the copies of 31e6368 (one legacy-stream cudaMemcpy per run), on one machine one after the other.
# Make the patch where the tree is a git checkout:
#   git diff 31e6368 4dd754b -- src/model/deepseek_v4/state_snapshot.cpp src/model/deepseek_v4/model.cpp \
#     src/backend/cuda/cuda_runner.cpp > .deps/new_copies.patch
# then on the GPU machine (carrying .deps as for tests/gpu/run.sh): OUT=DIR STRATA_COMMIT=SHA bash bench/run_pd_copies_ab_gpu.sh
set -u
start=$(date +%s)
for deb in .deps/debs/libboost*.deb; do [ -f .deps/boost/usr/include/boost/beast.hpp ] || dpkg -x "$deb" .deps/boost; done
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_TESTS=OFF -DSTRATA_CUDA=on -DSTRATA_CUDA_ARCHITECTURES=90a > /tmp/cm.log 2>&1 || tail -20 /tmp/cm.log
ninja -C build-gpu strata > /tmp/b1.log 2>&1 || tail -30 /tmp/b1.log
echo "built after $(( $(date +%s) - start )) s"
PROMPTS=128 timeout 150 bash bench/run_pd_gpu.sh $OUT/new $STRATA_COMMIT > $OUT/new_run.txt 2>&1; echo "new rc=$? after $(( $(date +%s) - start )) s"
grep "^{'replica'" $OUT/new_run.txt
(patch -R -p1 < .deps/new_copies.patch || git apply -R .deps/new_copies.patch) > /tmp/patch.log 2>&1 || cat /tmp/patch.log
ninja -C build-gpu strata > /tmp/b2.log 2>&1 || tail -30 /tmp/b2.log
echo "rebuilt after $(( $(date +%s) - start )) s"
PROMPTS=128 timeout 150 bash bench/run_pd_gpu.sh $OUT/old ${STRATA_COMMIT}-legacy-copies > $OUT/old_run.txt 2>&1; echo "old rc=$? after $(( $(date +%s) - start )) s"
grep "^{'replica'" $OUT/old_run.txt
patch -p1 < .deps/new_copies.patch > /tmp/patch.log 2>&1 || git apply .deps/new_copies.patch  # the tree as it was
cp $OUT/new/pd_bench_*_summary.json $OUT/summary_new.json; cp $OUT/old/pd_bench_*_summary.json $OUT/summary_old.json
tar czf $OUT/ab.tgz -C $OUT new old && rm -rf $OUT/new $OUT/old
