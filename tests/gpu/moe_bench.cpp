// Times the grouped routed-expert kernels of one V4-Flash MoE layer on the GPU machine, so the dispatch in
// moe.cpp can pick the fastest per step size: the SIMT kernels (moe.h, single-block plan: up to 4096
// pairs), the tensor-core kernels that keep tokens in accumulators (moe_mma.h, every compiled shape) and the GEMM
// tiles (moe_gemm.h, tiled plan), with bf16 weights and, for SIMT and tiles, FP8 weights. 256 routed experts of
// 2048 × 4096 plus the shared expert, each with its own storage (no L2 sharing), random distinct top-6 routing.
// Per kernel: the time of gate_up + down (plan excluded, timed apart), the weight bytes of the experts used over
// that time, and TFLOP/s.
// Usage: strata_gpu_moe_bench [BATCH...]   (default 1 16 64 128 256 1024 4096)
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_gemm.h"
#include "backend/cuda/moe_mma.h"
#include "cli/git_commit.h"
#include "run_provenance.h"

using strata::cuda::DeviceBuffer;
namespace sc = strata::cuda;

namespace {

double time_ms(const std::function<void()>& once) {
  once();
  cudaEvent_t t0, t1;
  STRATA_CUDA_CHECK(cudaEventCreate(&t0));
  STRATA_CUDA_CHECK(cudaEventCreate(&t1));
  const int reps = 5;
  STRATA_CUDA_CHECK(cudaEventRecord(t0));
  for (int i = 0; i < reps; ++i) once();
  STRATA_CUDA_CHECK(cudaEventRecord(t1));
  STRATA_CUDA_CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
  STRATA_CUDA_CHECK(cudaEventDestroy(t0));
  STRATA_CUDA_CHECK(cudaEventDestroy(t1));
  return ms / reps;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t experts = 256, k = 6, hidden = 4096, inter = 2048, all = experts + 1;
  std::vector<int64_t> batches = {1, 16, 64, 128, 256, 1024, 4096};
  if (argc > 1) {
    batches.clear();
    for (int i = 1; i < argc; ++i) batches.push_back(std::atoll(argv[i]));
  }
  try {
    std::mt19937_64 rng(7);
    const size_t per = static_cast<size_t>(inter * hidden);
    DeviceBuffer<__nv_bfloat16> w1(per * all), w3(per * all), w2(per * all);
    DeviceBuffer<uint8_t> q1(per * all), q3(per * all), q2(per * all);
    const size_t per_scales = static_cast<size_t>((inter / 128) * (hidden / 128));
    DeviceBuffer<float> scales(std::vector<float>(per_scales, 1e-3f));
    {
      std::vector<__nv_bfloat16> host(per);
      std::normal_distribution<float> d(0.0f, 0.02f);
      for (auto& v : host) v = __float2bfloat16(d(rng));
      std::vector<uint8_t> codes(per);
      for (auto& c : codes) c = static_cast<uint8_t>(rng() % 0x7f) | static_cast<uint8_t>(rng() % 2 ? 0x80 : 0);
      for (int64_t e = 0; e < all; ++e) {
        for (auto* w : {&w1, &w3, &w2})
          STRATA_CUDA_CHECK(cudaMemcpy(w->data() + e * per, host.data(), per * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
        for (auto* q : {&q1, &q3, &q2})
          STRATA_CUDA_CHECK(cudaMemcpy(q->data() + e * per, codes.data(), per, cudaMemcpyHostToDevice));
      }
    }
    std::vector<const void*> t1, t3, t2, f1, f3, f2;
    std::vector<const float*> s(static_cast<size_t>(all), scales.data());
    for (int64_t e = 0; e < all; ++e) {
      t1.push_back(w1.data() + e * per), t3.push_back(w3.data() + e * per), t2.push_back(w2.data() + e * per);
      f1.push_back(q1.data() + e * per), f3.push_back(q3.data() + e * per), f2.push_back(q2.data() + e * per);
    }
    DeviceBuffer<const void*> dt1(t1), dt3(t3), dt2(t2), df1(f1), df3(f3), df2(f2);
    DeviceBuffer<const float*> ds(s);
    // What a results file made from this table records (issue 23): the device, the date and the commit
    // (git's, "-dirty" for uncommitted changes; "unknown" on the GPU machine's copy without .git).
    {
      const strata::test::RunProvenance run = strata::test::run_provenance();
      std::printf("device: %s\ndate: %s\ncommit: %s\n", run.gpu.c_str(), run.date.c_str(), strata::cli::git_commit().c_str());
    }
    std::printf("%6s %6s %-14s %10s %10s %10s\n", "batch", "active", "kernel", "ms", "GB/s", "TFLOP/s");
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
      const int64_t max_tiles = sc::moe_max_tiles(pairs, all, sc::kMoeGemmTileTokens);
      DeviceBuffer<int32_t> dids(ids), pair_row(static_cast<size_t>(pairs)), start(static_cast<size_t>(all + 1)),
          act(static_cast<size_t>(all)), n_active(1), slot(static_cast<size_t>(pairs)),
          tile_expert(static_cast<size_t>(max_tiles)), tile_start(static_cast<size_t>(max_tiles)), tile_count(1),
          work(static_cast<size_t>(sc::moe_plan_work_ints(rows, experts)));
      DeviceBuffer<float> dw(weights), slot_weight(static_cast<size_t>(pairs)), y(static_cast<size_t>(pairs * hidden));
      DeviceBuffer<__nv_bfloat16> x(static_cast<size_t>(rows * hidden)), h(static_cast<size_t>(pairs * inter));
      x.fill_bytes(0x3c);
      const sc::MoePlan plan{pair_row.data(), start.data(), act.data(), n_active.data(), slot.data(), slot_weight.data()};
      const sc::MoeTiles tiles{tile_expert.data(), tile_start.data(), tile_count.data()};
      const double weight_bytes = static_cast<double>(active) * 3.0 * static_cast<double>(per);  // × 2 for bf16
      const double flops = 2.0 * 3.0 * static_cast<double>(pairs) * static_cast<double>(per);
      auto row = [&](const std::string& kernel, double ms, double bytes_per_param) {
        std::printf("%6lld %6lld %-14s %10.3f %10.0f %10.1f\n", static_cast<long long>(rows),
                    static_cast<long long>(active), kernel.c_str(), ms, weight_bytes * bytes_per_param / (ms * 1e-3) / 1e9,
                    flops / (ms * 1e-3) / 1e12);
      };
      const bool single = pairs <= sc::kMoePlanMaxPairs;
      if (single) {
        row("plan", time_ms([&] { sc::moe_plan(dids.data(), dw.data(), rows, k, experts, true, plan, nullptr); }), 0);
        row("simt bf16", time_ms([&] {
              sc::moe_gate_up(sc::GemmType::Bf16, x.data(), plan, std::min(all, pairs), dt1.data(), dt3.data(), nullptr,
                              nullptr, hidden, inter, 10.0f, h.data(), nullptr);
              sc::moe_down(sc::GemmType::Bf16, h.data(), plan, std::min(all, pairs), dt2.data(), nullptr, inter, hidden,
                           y.data(), nullptr);
            }),
            2);
        row("simt fp8", time_ms([&] {
              sc::moe_gate_up(sc::GemmType::Fp8, x.data(), plan, std::min(all, pairs), df1.data(), df3.data(), ds.data(),
                              ds.data(), hidden, inter, 10.0f, h.data(), nullptr);
              sc::moe_down(sc::GemmType::Fp8, h.data(), plan, std::min(all, pairs), df2.data(), ds.data(), inter, hidden,
                           y.data(), nullptr);
            }),
            1);
      }
      row("plan tiled", time_ms([&] {
            sc::moe_plan_tiled(dids.data(), dw.data(), rows, k, experts, true, plan, tiles, sc::kMoeGemmTileTokens,
                               work.data(), nullptr);
          }),
          0);
      for (const sc::MoeMmaShape shape : sc::moe_mma_shapes()) {
        if (shape.token_tiles != 2 && !single) continue;
        row("mma " + std::to_string(shape.token_tiles) + "x" + std::to_string(shape.warps), time_ms([&] {
              sc::moe_gate_up_mma(x.data(), plan, std::min(all, pairs), dt1.data(), dt3.data(), hidden, inter, 10.0f,
                                  h.data(), nullptr, shape);
              sc::moe_down_mma(h.data(), plan, std::min(all, pairs), dt2.data(), inter, hidden, y.data(), nullptr,
                               shape);
            }),
            2);
      }
      row("gemm bf16", time_ms([&] {
            sc::moe_gate_up_gemm(sc::GemmType::Bf16, x.data(), plan, tiles, max_tiles, dt1.data(), dt3.data(), nullptr,
                                 nullptr, hidden, inter, 10.0f, h.data(), nullptr);
            sc::moe_down_gemm(sc::GemmType::Bf16, h.data(), plan, tiles, max_tiles, dt2.data(), nullptr, inter, hidden,
                              y.data(), nullptr);
          }),
          2);
      row("gemm fp8", time_ms([&] {
            sc::moe_gate_up_gemm(sc::GemmType::Fp8, x.data(), plan, tiles, max_tiles, df1.data(), df3.data(), ds.data(),
                                 ds.data(), hidden, inter, 10.0f, h.data(), nullptr);
            sc::moe_down_gemm(sc::GemmType::Fp8, h.data(), plan, tiles, max_tiles, df2.data(), ds.data(), inter, hidden,
                              y.data(), nullptr);
          }),
          1);
    }
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 2;
  }
  return 0;
}
