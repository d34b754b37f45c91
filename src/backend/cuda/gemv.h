#pragma once
// Matrix products of a decode step's few rows (gemv.cu): bound by reading the weights once, where cuBLASLt's
// general kernels leave bandwidth unused. Same arithmetic contract as Gemm: operands of `type`, fp32 accumulation
// and output, y[t, n] = Σ_c x[t, c] · w[n, c]; `batch` products at element strides (grouped projections).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace strata::cuda {

constexpr int64_t kGemvMaxRows = 8;

// True when gemv takes this product: 1..kGemvMaxRows rows, whole 16-byte vectors, 16-byte aligned operands.
bool gemv_applies(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw,
                  int64_t stride_w, int64_t m, int64_t k);

void gemv(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w,
          float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch,
          cudaStream_t stream);

}  // namespace strata::cuda
