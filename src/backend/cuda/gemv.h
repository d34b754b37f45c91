#pragma once
// Matrix products of a decode step's few rows (gemv.cu): bound by reading the weights once, where cuBLASLt's
// general kernels leave bandwidth unused. Same arithmetic contract as Gemm: operands of `type`, fp32 accumulation
// and output, y[t, n] = Σ_c x[t, c] · w[n, c]; `batch` products at element strides (grouped projections).
//
// Every output element is summed in one order that depends on k alone (gemv.cu says which), never on m, n, batch,
// the grid or the entry point: a row's result is the same in any batch, and gemv_many gives the bits gemv gives.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace strata::cuda {

constexpr int64_t kGemvMaxRows = 8;
constexpr int kGemvMaxTargets = 8;

// True when gemv takes this product: 1..kGemvMaxRows rows, whole 16-byte vectors, 16-byte aligned operands.
bool gemv_applies(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw,
                  int64_t stride_w, int64_t m, int64_t k);

void gemv(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w,
          float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch,
          cudaStream_t stream);

// One of several products on the same input: w [n, k] row-major (row stride k), y [m, n] row-major (row stride n).
struct GemvTarget {
  const void* w;
  int64_t n;
  float* y;
};

// True when gemv_many takes these products: as gemv_applies for each (x row stride k), 1..kGemvMaxTargets targets.
bool gemv_many_applies(GemmType type, const void* x, int64_t m, int64_t k, const GemvTarget* targets, int count);

// y_i = x · w_iᵀ for every target in one launch (a layer's several projections of one activation, batch 1..8):
// each element bit-identical to gemv on that matrix alone. x [m, k] row-major, row stride k.
void gemv_many(GemmType type, const void* x, int64_t m, int64_t k, const GemvTarget* targets, int count,
               cudaStream_t stream);

// The previous kernel (one short block per eight rows, k sliced by the matrix's shape), same arguments as gemv.
// It exists only for tests/gpu/gemv_bench.cpp to time and check the current kernel against.
void gemv_legacy(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw,
                 int64_t stride_w, float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k,
                 int64_t batch, cudaStream_t stream);

}  // namespace strata::cuda
