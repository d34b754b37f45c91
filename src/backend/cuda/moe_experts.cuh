#pragma once
// Kernels of moe_experts.h: row gather, SwiGLU, combine.
// Compiled once, through v4_kernels.cu (one nvcc translation unit for every V4 kernel: see there).
#include "backend/cuda/moe_experts.h"
#include "backend/cuda/v4_device.cuh"

namespace strata::cuda {

namespace {

template <typename T>
__global__ void gather_rows_kernel(const float* x, const int32_t* index, T* y, int64_t d) {
  const float* src = x + static_cast<int64_t>(index[blockIdx.x]) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) y[blockIdx.x * d + c] = from_float<T>(src[c]);
}

template <typename T>
__global__ void swiglu_kernel(const float* gate, const float* up, T* h, int64_t n, float limit) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = fminf(gate[i], limit), u = fminf(fmaxf(up[i], -limit), limit);
  h[i] = from_float<T>(g / (1.0f + expf(-g)) * u);
}

// Blocks over (row, column slice): a decode step's one row still spreads over the GPU.
__global__ void moe_combine_kernel(const float* base, const float* routed, const int32_t* slot, const float* weight,
                                   float* out, int64_t k, int64_t d) {
  const int64_t r = blockIdx.x, c = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= d) return;
  float acc = 0.0f;
  for (int64_t j = 0; j < k; ++j) acc += routed[static_cast<int64_t>(slot[r * k + j]) * d + c] * weight[r * k + j];
  out[r * d + c] = acc + (base ? base[r * d + c] : 0.0f);
}

}  // namespace

void gather_rows(const float* x, const int32_t* index, void* y, int64_t n, int64_t d, GemmType type,
                 cudaStream_t stream) {
  if (n == 0) return;
  if (type == GemmType::Bf16)
    gather_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, index, static_cast<__nv_bfloat16*>(y), d);
  else
    gather_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(x, index, static_cast<float*>(y), d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void swiglu(const float* gate, const float* up, void* h, int64_t n, float limit, GemmType type, cudaStream_t stream) {
  if (n == 0) return;
  if (type == GemmType::Bf16)
    swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, static_cast<__nv_bfloat16*>(h), n, limit);
  else
    swiglu_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, static_cast<float*>(h), n, limit);
  STRATA_CUDA_CHECK_LAUNCH();
}

void moe_combine(const float* base, const float* routed, const int32_t* slot, const float* weight, float* out,
                 int64_t rows, int64_t k, int64_t d, cudaStream_t stream) {
  if (rows == 0) return;
  moe_combine_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(base, routed, slot,
                                                                                             weight, out, k, d);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
