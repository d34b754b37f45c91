// CudaBackend's MoE: route (router.cuh) and experts, grouped on the device (moe.cu, moe_gemm.cu, moe_mma.cu) or
// one cuBLASLt chain per expert (swiglu_expert; gather, SwiGLU and combine kernels: moe_experts.cuh).
#include <algorithm>

#include "backend/cuda/cuda_backend_op.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_experts.h"
#include "backend/cuda/moe_gemm.h"
#include "backend/cuda/moe_mma.h"
#include "backend/cuda/router.h"
#include "core/error.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

namespace {

// The most (row, expert) pairs a step takes on the streamed grouped kernels: one block's plan, and few enough pairs
// per expert that streaming each expert's weights once per step still pays.
int64_t streamed_max_pairs(int64_t n_experts) { return std::min(kMoePlanMaxPairs, 8 * n_experts); }

}  // namespace

CudaBackend::Routing CudaBackend::route(const Tensor& logits, const MoeWeights& w, const std::vector<int32_t>&,
                                        const ModelConfig& cfg) {
  STRATA_TIMED_OP("route");
  const int64_t n = logits.rows, k = cfg.num_experts_per_tok;
  Routing r{scratch_.alloc<int32_t>(n * k), scratch_.alloc<float>(n * k), n, k};
  float* scores = scratch_.alloc<float>(n * logits.cols);
  const int scoring = cfg.scoring_func == model::ScoringFunc::SqrtSoftplus ? 0
                      : cfg.scoring_func == model::ScoringFunc::Sigmoid    ? 1
                                                                           : 2;
  cuda::route(logits.data, weights_.vec(w.gate_bias), weights_.ints(w.tid2eid), tokens_, n, logits.cols, k, scoring,
              static_cast<float>(cfg.routed_scaling_factor), scores, r.ids, r.weights, stream_);
  return r;
}

void CudaBackend::swiglu_expert(const ExpertWeights& w, Operand x, int64_t m, float* y, double limit) {
  const DeviceMatrix &w1 = weights_.matrix(w.w1), &w3 = weights_.matrix(w.w3), &w2 = weights_.matrix(w.w2);
  if (x.type == GemmType::Fp32 && w1.type != GemmType::Fp32)
    x = operand(static_cast<const float*>(x.data), m, w1.cols, operand_type(w1, m));
  if (w3.type != w1.type) fail("CUDA experts: w1 and w3 of one expert must have one type");
  float* g = scratch_.alloc<float>(m * w1.rows);
  float* u = scratch_.alloc<float>(m * w3.rows);
  product(x, m, w1, g);
  product(x, m, w3, u);
  // FP8 down projections quantize h themselves (operand()), so h is fp32 for them; otherwise their own operand.
  const GemmType h_type = w2.type == GemmType::Fp8 ? GemmType::Fp32 : w2.type;
  void* h = gemm_operand(m * w1.rows, h_type);
  swiglu(g, u, h, m * w1.rows, static_cast<float>(limit), h_type, stream_);
  Operand hin{h, nullptr, h_type};
  if (w2.type == GemmType::Fp8) hin = operand(static_cast<const float*>(h), m, w1.rows, operand_type(w2, m));
  product(hin, m, w2, y);
}

// Decode-sized steps: routing grouped on the device and two grouped launches (moe.h), no host round trip. Larger
// steps: the routing comes back to the host, which groups rows by expert, then one cuBLASLt chain per expert with
// rows — at prefill sizes each expert has enough rows for a real GEMM and one sync per layer is noise.
CudaBackend::Tensor CudaBackend::experts(const Tensor& x, const Routing& routing, const MoeWeights& w,
                                         const ModelConfig& cfg) {
  STRATA_TIMED_OP("experts");
  const int64_t n = x.rows, d = x.cols, k = routing.k;
  const int64_t n_experts = static_cast<int64_t>(w.experts.size());
  const int64_t inter = n_experts ? w.experts[0].w1.rows : 0;
  // One launch per projection over every routed (row, expert) pair, grouped by expert on the device; the per-expert
  // loop below is left for the shapes the grouped kernels do not take.
  const DeviceWeights::ExpertTables* tables = n_experts ? &weights_.experts(w) : nullptr;
  const int64_t slots = k + (tables && tables->with_shared);  // per row: its routed experts, then the shared one
  // The grouped kernels' operands: fp32 for fp32 weights, else bf16 (FP8 experts are weight-only there).
  const GemmType grouped_in = tables && tables->type == GemmType::Fp32 ? GemmType::Fp32 : GemmType::Bf16;
  const int64_t pairs = n * slots, planned = n_experts + (tables && tables->with_shared);
  const int64_t max_tiles = moe_max_tiles(pairs, planned, kMoeGemmTileTokens);
  // Many tokens per expert (prefill, large batches): GEMM tiles over a plan of any size (moe_gemm.h). Else, up to
  // the single-block plan's size, the grouped kernels that stream each expert's weights once per step.
  // Batch-invariant mode takes the tiles at every step where they apply: a pair's sum is a chain of 16-column
  // tensor-core steps over the width, whatever tile it shares with other tokens (moe_gemm.h).
  const bool tiled = tables && moe_gemm_supported(tables->type, d, inter, max_tiles) &&
                     (invariant_ || moe_gemm_pays(tables->type, pairs, planned));
  if (invariant_ && !tiled && tables && moe_grouped_supported(tables->type, d, inter))
    return invariant_experts(x, routing, w, cfg);
  const bool streamed = tables && pairs <= streamed_max_pairs(n_experts) && moe_grouped_supported(tables->type, d, inter);
  if (tiled || streamed) {
    MoePlan plan{scratch_.alloc<int32_t>(pairs),  scratch_.alloc<int32_t>(planned + 1),
                 scratch_.alloc<int32_t>(planned), routed_active_ + routed_experts_.size(),
                 scratch_.alloc<int32_t>(pairs),  scratch_.alloc<float>(pairs)};
    routed_experts_.push_back(tables->with_shared ? -2 : -1);  // counted on the device (the shared one too)
    MoeTiles tiles;
    if (tiled) {
      tiles = {scratch_.alloc<int32_t>(max_tiles), scratch_.alloc<int32_t>(max_tiles), scratch_.alloc<int32_t>(1)};
      moe_plan_tiled(routing.ids, routing.weights, n, k, n_experts, tables->with_shared, plan, tiles,
                     kMoeGemmTileTokens, scratch_.alloc<int32_t>(moe_plan_work_ints(n, n_experts)), stream_);
    } else {
      moe_plan(routing.ids, routing.weights, n, k, n_experts, tables->with_shared, plan, stream_);
    }
    const int64_t max_active = std::min(planned, pairs);
    void* h = gemm_operand(pairs * inter, grouped_in);
    const void* xg = operand(x.data, n, d, grouped_in).data;
    float* routed = scratch_.alloc<float>(pairs * d);
    const auto limit = static_cast<float>(cfg.swiglu_limit);
    if (tiled) {
      moe_gate_up_gemm(tables->type, static_cast<const __nv_bfloat16*>(xg), plan, tiles, max_tiles, tables->w1,
                       tables->w3, tables->s1, tables->s3, d, inter, limit, static_cast<__nv_bfloat16*>(h), stream_);
      moe_down_gemm(tables->type, static_cast<const __nv_bfloat16*>(h), plan, tiles, max_tiles, tables->w2,
                    tables->s2, inter, d, routed, stream_);
    } else if (tables->type == GemmType::Bf16 && moe_mma_supported(d, inter) && moe_mma_pays(pairs, planned)) {
      // Many tokens per expert: tensor cores (moe_mma.h), the weights streamed once per 32 tokens.
      moe_gate_up_mma(static_cast<const __nv_bfloat16*>(xg), plan, max_active, tables->w1, tables->w3, d, inter,
                      limit, static_cast<__nv_bfloat16*>(h), stream_);
      moe_down_mma(static_cast<const __nv_bfloat16*>(h), plan, max_active, tables->w2, inter, d, routed, stream_);
    } else {
      moe_gate_up(tables->type, xg, plan, max_active, tables->w1, tables->w3, tables->s1, tables->s3, d, inter, limit,
                  h, stream_);
      moe_down(tables->type, h, plan, max_active, tables->w2, tables->s2, inter, d, routed, stream_);
    }
    float* shared = nullptr;
    if (w.shared && !tables->with_shared) {
      shared = scratch_.alloc<float>(n * d);
      swiglu_expert(*w.shared, {x.data, nullptr, GemmType::Fp32}, n, shared, cfg.swiglu_limit);
    }
    Tensor out = tensor(n, d);
    moe_combine(shared, routed, plan.slot, plan.slot_weight, out.data, n, slots, d, stream_);
    return out;
  }

  // Batch-invariant mode reaches here only for shapes the grouped kernels do not take: one chain per expert, whose
  // products (invariant_product) give a row the same bits however many rows share its expert.
  not_recordable("experts grouped on the host");
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<float> weight(ids.size());
  STRATA_CUDA_CHECK(cudaMemcpyAsync(ids.data(), routing.ids, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(weight.data(), routing.weights, weight.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));

  // Rows of each expert in row order; each (row, expert) pair gets a slot in the routed output.
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(n_experts));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) rows_of[static_cast<size_t>(ids[static_cast<size_t>(r * k + j)])].push_back(static_cast<int32_t>(r));
  std::vector<int32_t> gather, start(static_cast<size_t>(n_experts + 1), 0);
  for (int64_t e = 0; e < n_experts; ++e) {
    start[static_cast<size_t>(e)] = static_cast<int32_t>(gather.size());
    gather.insert(gather.end(), rows_of[static_cast<size_t>(e)].begin(), rows_of[static_cast<size_t>(e)].end());
  }
  start[static_cast<size_t>(n_experts)] = static_cast<int32_t>(gather.size());
  // Each row sums its experts in ascending expert order, as the CPU reference does.
  std::vector<int32_t> slot(static_cast<size_t>(n * k));
  std::vector<float> slot_weight(slot.size());
  std::vector<int32_t> next(start.begin(), start.end() - 1);
  for (int64_t r = 0; r < n; ++r) {
    std::vector<std::pair<int32_t, float>> mine;
    for (int64_t j = 0; j < k; ++j) mine.emplace_back(ids[static_cast<size_t>(r * k + j)], weight[static_cast<size_t>(r * k + j)]);
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (int64_t j = 0; j < k; ++j) {
      slot[static_cast<size_t>(r * k + j)] = next[static_cast<size_t>(mine[static_cast<size_t>(j)].first)]++;
      slot_weight[static_cast<size_t>(r * k + j)] = mine[static_cast<size_t>(j)].second;
    }
  }

  routed_experts_.push_back(std::count_if(rows_of.begin(), rows_of.end(), [](const auto& r) { return !r.empty(); }));
  const int64_t total = static_cast<int64_t>(gather.size());
  // Rows gathered as the experts' operand (bf16/fp32), or as fp32 for FP8 experts, whose products quantize each
  // expert's rows themselves.
  const GemmType routed_type = n_experts ? weights_.matrix(w.experts[0].w1).type : GemmType::Fp32;
  const GemmType gathered = routed_type == GemmType::Fp8 ? GemmType::Fp32 : routed_type;
  const auto size = static_cast<int64_t>(gemm_type_size(gathered));
  auto* xg = static_cast<char*>(gemm_operand(std::max<int64_t>(1, total) * d, gathered));
  gather_rows(x.data, upload(gather), xg, total, d, gathered, stream_);
  float* routed = scratch_.alloc<float>(std::max<int64_t>(1, total) * d);
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t m = start[static_cast<size_t>(e + 1)] - start[static_cast<size_t>(e)];
    if (m == 0) continue;
    swiglu_expert(w.experts[static_cast<size_t>(e)], {xg + start[static_cast<size_t>(e)] * d * size, nullptr, gathered},
                  m, routed + start[static_cast<size_t>(e)] * d, cfg.swiglu_limit);
  }
  float* shared = nullptr;
  if (w.shared) {
    shared = scratch_.alloc<float>(n * d);
    swiglu_expert(*w.shared, {x.data, nullptr, GemmType::Fp32}, n, shared, cfg.swiglu_limit);
  }
  Tensor out = tensor(n, d);
  moe_combine(shared, routed, upload(slot), upload(slot_weight), out.data, n, k, d, stream_);
  return out;
}

// Batch-invariant experts where the tiles (moe_gemm.h) do not apply: the device-grouped kernels (moe.h) for every
// step, in chunks of rows small enough for one block's plan. Those kernels sum each (row, expert) pair over the
// hidden width in an order fixed by the widths alone — not by how many pairs share the expert — and the combine adds
// a row's experts in ascending order, so a row's output does not depend on the other rows of its step or chunk.
CudaBackend::Tensor CudaBackend::invariant_experts(const Tensor& x, const Routing& routing, const MoeWeights& w,
                                                   const ModelConfig& cfg) {
  const int64_t n = x.rows, d = x.cols, k = routing.k;
  const DeviceWeights::ExpertTables& tables = weights_.experts(w);
  const int64_t n_experts = static_cast<int64_t>(w.experts.size()), inter = w.experts[0].w1.rows;
  const int64_t slots = k + tables.with_shared, planned = n_experts + tables.with_shared;
  const GemmType grouped_in = tables.type == GemmType::Fp32 ? GemmType::Fp32 : GemmType::Bf16;
  const int64_t chunk = std::max<int64_t>(1, streamed_max_pairs(n_experts) / slots);
  const auto* xg = static_cast<const char*>(operand(x.data, n, d, grouped_in).data);
  const size_t row_bytes = static_cast<size_t>(d) * gemm_type_size(grouped_in);
  float* shared = nullptr;
  if (w.shared && !tables.with_shared) {
    shared = scratch_.alloc<float>(n * d);
    swiglu_expert(*w.shared, {x.data, nullptr, GemmType::Fp32}, n, shared, cfg.swiglu_limit);
  }
  Tensor out = tensor(n, d);
  const int64_t most = std::min(n, chunk) * slots;
  MoePlan plan{scratch_.alloc<int32_t>(most), scratch_.alloc<int32_t>(planned + 1), scratch_.alloc<int32_t>(planned),
               nullptr, scratch_.alloc<int32_t>(most), scratch_.alloc<float>(most)};
  // The step's active-expert count (a statistic, routed_experts) is its first chunk's: the whole step at decode
  // sizes; a lower bound for larger steps.
  int32_t* later_counts = scratch_.alloc<int32_t>(1);
  routed_experts_.push_back(tables.with_shared ? -2 : -1);
  void* h = gemm_operand(most * inter, grouped_in);
  float* routed = scratch_.alloc<float>(most * d);
  const auto limit = static_cast<float>(cfg.swiglu_limit);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0), pairs = rows * slots;
    plan.n_active = r0 == 0 ? routed_active_ + routed_experts_.size() - 1 : later_counts;
    moe_plan(routing.ids + r0 * k, routing.weights + r0 * k, rows, k, n_experts, tables.with_shared, plan, stream_);
    const int64_t max_active = std::min(planned, pairs);
    moe_gate_up(tables.type, xg + static_cast<size_t>(r0) * row_bytes, plan, max_active, tables.w1, tables.w3,
                tables.s1, tables.s3, d, inter, limit, h, stream_);
    moe_down(tables.type, h, plan, max_active, tables.w2, tables.s2, inter, d, routed, stream_);
    moe_combine(shared ? shared + r0 * d : nullptr, routed, plan.slot, plan.slot_weight, out.data + r0 * d, rows, slots,
                d, stream_);
  }
  return out;
}

}  // namespace strata::cuda
