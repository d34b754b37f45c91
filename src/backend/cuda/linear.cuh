#pragma once
// Kernels of linear.h: embedding rows and GEMM operands.
// Compiled once, through v4_kernels.cu (one nvcc translation unit for every V4 kernel: see there).
#include "backend/cuda/linear.h"
#include "backend/cuda/v4_device.cuh"

namespace strata::cuda {

namespace {

template <typename T>
__global__ void to_gemm_input_kernel(const float* x, T* y, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = from_float<T>(x[i]);
}

template <typename T>
__global__ void embed_kernel(const T* table, const int32_t* tokens, float* out, int64_t d, int64_t copies) {
  const int64_t r = blockIdx.x;
  const T* src = table + static_cast<int64_t>(tokens[r]) * d;
  for (int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < d; c += gridDim.y * blockDim.x) {
    const float v = to_float(src[c]);
    for (int64_t h = 0; h < copies; ++h) out[(r * copies + h) * d + c] = v;
  }
}

__global__ void gather_rows_kernel(const float* x, int64_t cols, const int32_t* rows, float* out) {
  const int64_t i = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[i]) * cols;
  for (int64_t c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols; c += gridDim.y * blockDim.x)
    out[i * cols + c] = src[c];
}

}  // namespace

void to_gemm_input(const float* x, void* y, int64_t n, GemmType type, cudaStream_t stream) {
  if (n == 0) return;
  if (type == GemmType::Bf16)
    to_gemm_input_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<__nv_bfloat16*>(y), n);
  else
    to_gemm_input_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, static_cast<float*>(y), n);
  STRATA_CUDA_CHECK_LAUNCH();
}

void embed(const void* table, GemmType type, const int32_t* tokens, float* out, int64_t rows, int64_t d,
           int64_t copies, cudaStream_t stream) {
  if (rows == 0) return;
  if (type == GemmType::Bf16)
    embed_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(table), tokens, out, d, copies);
  else
    embed_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(
        static_cast<const float*>(table), tokens, out, d, copies);
  STRATA_CUDA_CHECK_LAUNCH();
}

void gather_rows(const float* x, int64_t cols, const int32_t* rows, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  gather_rows_kernel<<<dim3(static_cast<unsigned>(count), blocks_for(cols)), kThreads, 0, stream>>>(x, cols, rows, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
