// Times the tensor-core grouped experts (moe_mma.h) of one V4-Flash MoE layer on the GPU machine, for every
// compiled kernel shape and several decode batch sizes, so the dispatch can pick the fastest. Random bf16 weights
// (256 routed experts of 2048 × 4096, plus the shared expert), random distinct top-6 routing. Reports the time of
// gate_up + down and the weight bytes of the experts actually used over that time.
// Usage: strata_gpu_moe_bench [BATCH...]   (default 16 32 64 128 256)
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_mma.h"

using strata::cuda::DeviceBuffer;
namespace sc = strata::cuda;

int main(int argc, char** argv) {
  const int64_t experts = 256, k = 6, hidden = 4096, inter = 2048, all = experts + 1;
  std::vector<int64_t> batches = {16, 32, 64, 128, 256};
  if (argc > 1) {
    batches.clear();
    for (int i = 1; i < argc; ++i) batches.push_back(std::atoll(argv[i]));
  }
  try {
    std::mt19937_64 rng(7);
    // One random bf16 matrix per role, shared by every expert's pointer table entry would let L2 cache it: each
    // expert gets its own storage.
    const size_t per = static_cast<size_t>(inter * hidden);
    DeviceBuffer<__nv_bfloat16> w1(per * all), w3(per * all), w2(per * all);
    {
      std::vector<__nv_bfloat16> host(per);
      std::normal_distribution<float> d(0.0f, 0.02f);
      for (auto& v : host) v = __float2bfloat16(d(rng));
      for (int64_t e = 0; e < all; ++e)
        for (auto* w : {&w1, &w3, &w2})
          STRATA_CUDA_CHECK(cudaMemcpy(w->data() + e * per, host.data(), per * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
    }
    std::vector<const void*> t1, t3, t2;
    for (int64_t e = 0; e < all; ++e)
      t1.push_back(w1.data() + e * per), t3.push_back(w3.data() + e * per), t2.push_back(w2.data() + e * per);
    DeviceBuffer<const void*> dt1(t1), dt3(t3), dt2(t2);
    std::printf("%6s %6s %6s %6s %10s %10s\n", "batch", "active", "tiles", "warps", "ms", "GB/s");
    for (const int64_t rows : batches) {
      std::vector<int32_t> ids;
      std::vector<float> weights;
      std::set<int32_t> used;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int32_t> pick(static_cast<size_t>(experts));
        for (int64_t e = 0; e < experts; ++e) pick[static_cast<size_t>(e)] = static_cast<int32_t>(e);
        std::shuffle(pick.begin(), pick.end(), rng);
        for (int64_t j = 0; j < k; ++j) ids.push_back(pick[static_cast<size_t>(j)]), weights.push_back(1.0f / k),
                                         used.insert(pick[static_cast<size_t>(j)]);
      }
      const int64_t pairs = rows * (k + 1), active = static_cast<int64_t>(used.size()) + 1;
      DeviceBuffer<int32_t> dids(ids), pair_row(static_cast<size_t>(pairs)), start(static_cast<size_t>(all + 1)),
          act(static_cast<size_t>(all)), n_active(1), slot(static_cast<size_t>(pairs));
      DeviceBuffer<float> dw(weights), slot_weight(static_cast<size_t>(pairs)), y(static_cast<size_t>(pairs * hidden));
      DeviceBuffer<__nv_bfloat16> x(static_cast<size_t>(rows * hidden)), h(static_cast<size_t>(pairs * inter));
      x.fill_bytes(0x3c);
      const sc::MoePlan plan{pair_row.data(), start.data(), act.data(), n_active.data(), slot.data(), slot_weight.data()};
      sc::moe_plan(dids.data(), dw.data(), rows, k, experts, true, plan, nullptr);
      const double bytes = static_cast<double>(active) * 3.0 * static_cast<double>(per) * 2.0;
      cudaEvent_t t0, t1e;
      STRATA_CUDA_CHECK(cudaEventCreate(&t0));
      STRATA_CUDA_CHECK(cudaEventCreate(&t1e));
      for (const sc::MoeMmaShape shape : sc::moe_mma_shapes()) {
        auto once = [&] {
          sc::moe_gate_up_mma(x.data(), plan, std::min(all, pairs), dt1.data(), dt3.data(), hidden, inter, 10.0f,
                              h.data(), nullptr, shape);
          sc::moe_down_mma(h.data(), plan, std::min(all, pairs), dt2.data(), inter, hidden, y.data(), nullptr, shape);
        };
        once();
        const int reps = 5;
        STRATA_CUDA_CHECK(cudaEventRecord(t0));
        for (int i = 0; i < reps; ++i) once();
        STRATA_CUDA_CHECK(cudaEventRecord(t1e));
        STRATA_CUDA_CHECK(cudaEventSynchronize(t1e));
        float ms = 0;
        STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1e));
        ms /= reps;
        std::printf("%6lld %6lld %6d %6d %10.3f %10.0f\n", static_cast<long long>(rows), static_cast<long long>(active),
                    shape.token_tiles, shape.warps, ms, bytes / (ms * 1e-3) / 1e9);
      }
    }
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
  return 0;
}
