// CudaBackend's products: embed, linear, linear_many, grouped_linear, and the operands they take (fp32 activations
// converted to bf16 or fp8, kept per layer), dispatched to cuBLASLt (gemm.cpp), the GEMV kernels (gemv.cu) or the
// FP8 paths (fp8.cu). Kernels: linear.cuh.
#include <algorithm>

#include "backend/cuda/cuda_backend_op.h"
#include "backend/cuda/fp8.h"
#include "backend/cuda/gemm_fixed_order.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/linear.h"
#include "core/error.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

CudaBackend::Tensor CudaBackend::embed(const WeightRef& table, const std::vector<int32_t>& tokens, int64_t copies) {
  STRATA_TIMED_OP("embed");
  const DeviceMatrix& t = weights_.matrix(table);
  Tensor out = tensor(static_cast<int64_t>(tokens.size()), copies * t.cols);
  cuda::embed(t.data, t.type, tokens_, out.data, out.rows, t.cols, copies, stream_);
  return out;
}

// Whether prefill-sized products with FP8 weights use cuBLASLt's FP8 GEMM (activations quantized to e4m3) or the
// dequantized-bf16 fallback. Off: on the H200 (2026-11-29) Gemm::fp8 matched its reference for every k of 512 and
// more, but cuBLASLt returned an algorithm for k = 256 whose results were garbage, and the whole-model check ran with
// those products in it; Gemm::fp8_supported now refuses such k, and switching this on waits for a whole-model run
// (branch fp8-wip). Decode-sized products are weight-only FP8 either way.
constexpr bool kFp8GemmInModel = false;

GemmType CudaBackend::operand_type(const DeviceMatrix& w, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw,
                                   int64_t ldy) {
  if (w.type != GemmType::Fp8) return w.type;
  return kFp8GemmInModel && !invariant_ && m > kGemvMaxRows && gemm_.fp8_supported(m, n, k, ldx, ldw, ldy) ? GemmType::Fp8
                                                                                              : GemmType::Bf16;
}

CudaBackend::Operand CudaBackend::operand(const float* x, int64_t m, int64_t k, GemmType type) {
  if (type == GemmType::Fp32) return {x, nullptr, GemmType::Fp32};
  const auto key = std::pair{x, type};
  if (const auto it = converted_.find(key); it != converted_.end() && it->second.first == std::pair{m, k})
    return it->second.second;
  Operand o{gemm_operand((type == GemmType::Fp8 ? fp8_padded_rows(m) : m) * k, type), nullptr, type};
  if (type == GemmType::Fp8) {
    float* scales = scratch_.alloc<float>(fp8_padded_rows(m) * ((k + kFp8Block - 1) / kFp8Block));
    quantize_fp8_rows(x, k, m, k, static_cast<uint8_t*>(const_cast<void*>(o.data)), scales, stream_);
    o.scales = scales;
  } else {
    to_gemm_input(x, const_cast<void*>(o.data), m * k, type, stream_);
  }
  converted_[key] = {{m, k}, o};
  return o;
}

void CudaBackend::changed(const float* x) {
  for (const GemmType t : {GemmType::Bf16, GemmType::Fp32, GemmType::Fp8}) converted_.erase({x, t});
}

void CudaBackend::invariant_product(const Operand& x, int64_t ldx, int64_t stride_x, int64_t m, const DeviceMatrix& w,
                                    int64_t rows, int64_t k, int64_t stride_w, int64_t groups, float* y, int64_t ldy,
                                    int64_t stride_y) {
  const GemmType in = w.type == GemmType::Fp8 ? GemmType::Bf16 : w.type;
  if (x.type != in) fail("CUDA batch-invariant product: a ", gemm_type_name(x.type), " operand for ", gemm_type_name(w.type), " weights");
  if (w.type == GemmType::Fp32) {
    // fp32 weights (the reference precision): the GEMV, 8 rows at a time, for every row count.
    const auto* x0 = static_cast<const float*>(x.data);
    for (int64_t r0 = 0; r0 < m; r0 += kGemvMaxRows) {
      const int64_t mc = std::min(kGemvMaxRows, m - r0);
      if (!gemv_applies(GemmType::Fp32, x0 + r0 * ldx, ldx, stride_x, w.data, k, stride_w, mc, k))
        fail("--batch-invariant: the GEMV does not take an fp32 product of k = ", k, " (rows of whole 16-byte vectors, aligned)");
      gemv(GemmType::Fp32, x0 + r0 * ldx, ldx, stride_x, w.data, k, stride_w, y + r0 * ldy, ldy, stride_y, mc, rows, k,
           groups, stream_);
    }
    return;
  }
  // bf16 and FP8 weights: the fixed-order tensor-core product (gemm_fixed_order.h), whose bits do not depend on m.
  const auto* xb = static_cast<const __nv_bfloat16*>(x.data);
  const int64_t scratch_floats = fixed_order_scratch_floats(m, rows, k, groups);
  float* fixed_scratch = scratch_floats ? scratch_.alloc<float>(scratch_floats) : nullptr;
  if (fixed_order_applies(w.type, xb, ldx, stride_x, w.data, k, stride_w, k)) {
    fixed_order_product(w.type, xb, ldx, stride_x, w.data, k, stride_w, w.scales, w.scale_cols(),
                        rows / kFp8Block * w.scale_cols(), y, ldy, stride_y, m, rows, k, groups, fixed_scratch,
                        stream_);
    return;
  }
  // FP8 weights with partial 128-blocks: this layer's bf16 copy, for every row count alike.
  if (w.type == GemmType::Fp8) {
    auto* wb = scratch_.alloc<__nv_bfloat16>(w.rows * w.cols);
    dequantize_fp8(static_cast<const uint8_t*>(w.data), w.scales, w.rows, w.cols, wb, stream_);
    if (fixed_order_applies(GemmType::Bf16, xb, ldx, stride_x, wb, k, stride_w, k)) {
      fixed_order_product(GemmType::Bf16, xb, ldx, stride_x, wb, k, stride_w, nullptr, 0, 0, y, ldy, stride_y, m, rows,
                          k, groups, fixed_scratch, stream_);
      return;
    }
  }
  fail("--batch-invariant: the fixed-order product does not take a ", gemm_type_name(w.type), " product of k = ", k,
       " (k a multiple of 16, rows of whole aligned 16-byte vectors)");
}

void CudaBackend::product(const Operand& x, int64_t m, const DeviceMatrix& w, float* y) {
  if (invariant_) {
    invariant_product(x, w.cols, 0, m, w, w.rows, w.cols, 0, 1, y, w.rows, 0);
    return;
  }
  if (w.type != GemmType::Fp8) {
    if (x.type != w.type) fail("CUDA product: a ", gemm_type_name(x.type), " operand for ", gemm_type_name(w.type), " weights");
    if (gemv_applies(w.type, x.data, w.cols, 0, w.data, w.cols, 0, m, w.cols))
      gemv(w.type, x.data, w.cols, 0, w.data, w.cols, 0, y, w.rows, 0, m, w.rows, w.cols, 1, stream_);
    else
      gemm_.run(w.type, x.data, w.cols, w.data, w.cols, y, w.rows, m, w.rows, w.cols, stream_);
    return;
  }
  if (x.type == GemmType::Fp8) {
    gemm_.fp8(x.data, w.cols, x.scales, w.data, w.cols, w.scales, y, w.rows, m, w.rows, w.cols, stream_);
    return;
  }
  if (x.type != GemmType::Bf16) fail("CUDA product: a ", gemm_type_name(x.type), " operand for FP8 weights");
  const auto* xb = static_cast<const __nv_bfloat16*>(x.data);
  if (gemv_fp8_applies(x.data, w.cols, 0, w.data, w.cols, 0, m, w.cols)) {
    gemv_fp8(xb, w.cols, 0, static_cast<const uint8_t*>(w.data), w.cols, 0, w.scales, w.scale_cols(), 0, y, w.rows, 0,
             m, w.rows, w.cols, 1, stream_);
    return;
  }
  // A shape neither FP8 kernel takes (partial 128-blocks; not V4-Flash's): this layer's copy of the weights in bf16.
  auto* wb = scratch_.alloc<__nv_bfloat16>(w.rows * w.cols);
  dequantize_fp8(static_cast<const uint8_t*>(w.data), w.scales, w.rows, w.cols, wb, stream_);
  gemm_.run(GemmType::Bf16, x.data, w.cols, wb, w.cols, y, w.rows, m, w.rows, w.cols, stream_);
}

CudaBackend::Tensor CudaBackend::linear(const Tensor& x, const WeightRef& w) {
  STRATA_TIMED_OP("linear");
  const DeviceMatrix& d = weights_.matrix(w);
  if (d.cols != x.cols) fail("CUDA linear: input width ", x.cols, " against a weight of ", d.rows, "x", d.cols);
  const Operand xin = operand(x.data, x.rows, x.cols, operand_type(d, x.rows));
  Tensor y = tensor(x.rows, d.rows);
  product(xin, x.rows, d, y.data);
  return y;
}

std::vector<CudaBackend::Tensor> CudaBackend::linear_many(const Tensor& x, const std::vector<const WeightRef*>& ws) {
  std::vector<Tensor> out;
  // Decode sizes: every product in one GEMV launch (gemv_many gives each the bits gemv gives), when the weights
  // share a type the GEMV reads (bf16 or fp32: FP8 weights take gemv_fp8, one launch each).
  std::vector<const DeviceMatrix*> d;
  for (const WeightRef* w : ws) d.push_back(&weights_.matrix(*w));
  const bool one_type = !d.empty() && std::all_of(d.begin(), d.end(), [&](const DeviceMatrix* m) {
    return m->type == d[0]->type && m->type != GemmType::Fp8 && m->cols == x.cols;
  });
  // Batch-invariant mode keeps it for fp32 only: bf16 products take the fixed-order kernels at every row count.
  if (one_type && (!invariant_ || d[0]->type == GemmType::Fp32) && x.rows <= kGemvMaxRows &&
      static_cast<int64_t>(d.size()) <= kGemvMaxTargets) {
    STRATA_TIMED_OP("linear_many");
    const Operand xin = operand(x.data, x.rows, x.cols, d[0]->type);
    std::vector<GemvTarget> targets;
    for (const DeviceMatrix* m : d) targets.push_back({m->data, m->rows, nullptr});
    if (gemv_many_applies(d[0]->type, xin.data, x.rows, x.cols, targets.data(), static_cast<int>(targets.size()))) {
      for (size_t i = 0; i < d.size(); ++i) {
        out.push_back(tensor(x.rows, d[i]->rows));
        targets[i].y = out.back().data;
      }
      gemv_many(d[0]->type, xin.data, x.rows, x.cols, targets.data(), static_cast<int>(targets.size()), stream_);
      return out;
    }
  }
  for (const WeightRef* w : ws) out.push_back(linear(x, *w));
  return out;
}

CudaBackend::Tensor CudaBackend::grouped_linear(const Tensor& x, const WeightRef& w, int64_t groups) {
  STRATA_TIMED_OP("grouped_linear");
  const DeviceMatrix& d = weights_.matrix(w);
  const int64_t group_in = x.cols / groups, rank = d.rows / groups;
  if (d.cols != group_in) fail("CUDA grouped linear: group width ", group_in, " against a weight of ", d.rows, "x", d.cols);
  Tensor y = tensor(x.rows, groups * rank);
  if (invariant_) {
    const Operand xin = operand(x.data, x.rows, x.cols, d.type == GemmType::Fp8 ? GemmType::Bf16 : d.type);
    invariant_product(xin, x.cols, group_in, x.rows, d, rank, group_in, rank * group_in, groups, y.data, y.cols, rank);
    return y;
  }
  if (d.type == GemmType::Fp8) {
    // Uploaded as FP8 only with whole 128-blocks per group (DeviceWeights), so group g's weight scales are block
    // rows [g·rank/128, …) of the matrix's, and its activation scales block rows [g·group_in/128, …) of x's.
    const int64_t scale_stride = rank / kFp8Block * d.scale_cols();
    // Group g's weight scales start g·scale_stride floats in: the FP8 GEMM wants them 16-byte aligned (the
    // activations' start at (g·group_in/128) times a padded row count, always aligned).
    const bool scales_aligned = scale_stride % 4 == 0;
    const GemmType in_type =
        scales_aligned ? operand_type(d, x.rows, rank, group_in, x.cols, group_in, y.cols) : GemmType::Bf16;
    const Operand xin = operand(x.data, x.rows, x.cols, in_type);
    const auto* codes = static_cast<const uint8_t*>(d.data);
    if (xin.type == GemmType::Fp8) {
      for (int64_t g = 0; g < groups; ++g)
        gemm_.fp8(static_cast<const uint8_t*>(xin.data) + g * group_in, x.cols,
                  xin.scales + g * (group_in / kFp8Block) * fp8_padded_rows(x.rows), codes + g * rank * group_in, group_in,
                  d.scales + g * scale_stride, y.data + g * rank, y.cols, x.rows, rank, group_in, stream_);
    } else if (gemv_fp8_applies(xin.data, x.cols, group_in, d.data, group_in, rank * group_in, x.rows, group_in)) {
      gemv_fp8(static_cast<const __nv_bfloat16*>(xin.data), x.cols, group_in, codes, group_in, rank * group_in,
               d.scales, d.scale_cols(), scale_stride, y.data, y.cols, rank, x.rows, rank, group_in, groups, stream_);
    } else {
      auto* wb = scratch_.alloc<__nv_bfloat16>(d.rows * d.cols);
      dequantize_fp8(codes, d.scales, d.rows, d.cols, wb, stream_);
      gemm_.run_batched(GemmType::Bf16, xin.data, x.cols, group_in, wb, group_in, rank * group_in, y.data, y.cols,
                        rank, x.rows, rank, group_in, groups, stream_);
    }
    return y;
  }
  const void* xin = operand(x.data, x.rows, x.cols, d.type).data;
  // One strided-batched product: group g reads x's columns [g·in, (g+1)·in) and w's rows [g·rank, (g+1)·rank).
  if (gemv_applies(d.type, xin, x.cols, group_in, d.data, group_in, rank * group_in, x.rows, group_in))
    gemv(d.type, xin, x.cols, group_in, d.data, group_in, rank * group_in, y.data, y.cols, rank, x.rows, rank, group_in,
         groups, stream_);
  else
    gemm_.run_batched(d.type, xin, x.cols, group_in, d.data, group_in, rank * group_in, y.data, y.cols, rank, x.rows,
                      rank, group_in, groups, stream_);
  return y;
}

}  // namespace strata::cuda
