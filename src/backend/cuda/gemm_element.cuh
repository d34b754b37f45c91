#pragma once
// GEMM operand elements on the device (ops.h GemmType): bf16, rounded to nearest even, or fp32; kernels read and
// write them through float.
#include <cuda_bf16.h>

namespace strata::cuda {

__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float to_float(float v) { return v; }

template <typename T>
__device__ inline T from_float(float v);
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ inline float from_float<float>(float v) {
  return v;
}

}  // namespace strata::cuda
