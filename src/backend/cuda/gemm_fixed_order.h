#pragma once
// Tensor-core products whose every output element is summed in one order fixed by k alone (gemm_fixed_order.cu):
// the products of --batch-invariant (docs/batch_invariance.md) at every row count, so a row's bits do not depend on
// how many rows share its step, and prefill-sized steps still run on tensor cores.
//
// y[t, n] = Σ_c x[t, c] · w[n, c]: x bf16, w bf16 or e4m3 codes with one fp32 scale per 128×128 block (fp8.h), fp32
// out. The order, whatever kernel computes the element:
//   for each 128-column chunk c of k (the last one may be shorter, a multiple of 16):
//     p = 0; for each 16 columns of the chunk, in order: p = mma(p, x[t, 16 columns], w[n, 16 columns])
//         (one m16n16k16 tensor-core step with fp32 accumulation; e4m3 codes enter it exactly as bf16)
//     total = total + p (bf16 weights), or total = fma(scale[n/128, c], p, total) (FP8 weights), total starting at 0
// Three kernels compute it — one for few rows (the chunks of one 16-channel tile spread over warps, then folded in
// order), one for at most 16 rows of a narrow product (the chunks spread over blocks, their partial sums folded in
// order by a second launch), one for many rows (128×128 tiles with the chunks walked in order) — and give the same
// bits for every element (tests/gpu/ops_check.cpp compares them), so which one a step's shape picks changes nothing.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace strata::cuda {

enum class FixedOrderKernel { Auto, FewRows, ManyRows, SplitChunks };

// True when fixed_order_product takes this product: weights bf16 (k a multiple of 16) or FP8 (k a multiple of 128),
// x bf16; every operand, row stride and group stride in whole 16-byte vectors.
bool fixed_order_applies(GemmType weight_type, const void* x, int64_t ldx, int64_t stride_x, const void* w,
                         int64_t ldw, int64_t stride_w, int64_t k);

// Floats of scratch fixed_order_product's own choice of kernel uses for this shape (0: none), and what the split
// kernel needs when a caller picks it (at most 16 rows).
int64_t fixed_order_scratch_floats(int64_t m, int64_t n, int64_t k, int64_t groups);
int64_t fixed_order_split_floats(int64_t m, int64_t n, int64_t k, int64_t groups);

// `groups` products at element strides (stride_* per group): x [m, k] (row stride ldx), w [n, k] (row stride ldw),
// y [m, n] (row stride ldy). FP8 weights: scales [ceil(n/128), scale_ld] per group, scale_stride apart. `scratch`:
// fixed_order_scratch_floats(m, n, k, groups) floats of device memory (fixed_order_split_floats with
// FixedOrderKernel::SplitChunks), or null where that is 0.
void fixed_order_product(GemmType weight_type, const __nv_bfloat16* x, int64_t ldx, int64_t stride_x, const void* w,
                         int64_t ldw, int64_t stride_w, const float* scales, int64_t scale_ld, int64_t scale_stride,
                         float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t groups,
                         float* scratch, cudaStream_t stream, FixedOrderKernel kernel = FixedOrderKernel::Auto);

}  // namespace strata::cuda
