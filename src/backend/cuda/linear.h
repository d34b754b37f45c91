#pragma once
// The products' element kernels (linear.cuh): token rows into fp32 activations, activations into GEMM operands.
// CudaBackend's embed / linear / grouped_linear are in linear.cpp. Pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace strata::cuda {

// y[i] = x[i] as `type` (bf16 rounds; fp32 copies) for i < n: activations into GEMM operands.
void to_gemm_input(const float* x, void* y, int64_t n, GemmType type, cudaStream_t stream);
// out[r, h·d + c] = table[tokens[r], c] for h < copies; the table's elements are of `type`.
void embed(const void* table, GemmType type, const int32_t* tokens, float* out, int64_t rows, int64_t d,
           int64_t copies, cudaStream_t stream);
// out[i, c] = x[rows[i], c] for i < count: rows of activations gathered (the stream rows a step keeps).
void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t count, float* out, cudaStream_t stream);

}  // namespace strata::cuda
