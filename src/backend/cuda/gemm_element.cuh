#pragma once
// GEMM operand elements on the device (ops.h GemmType): bf16, rounded to nearest even, or fp32; kernels read and
// write them through float.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// The 16 e4m3 codes of a 16-byte vector as floats (pairs through the hardware's fp8x2 → half2 conversion; every
// e4m3 value is exact in half).
__device__ inline void fp8x16_to_float(const uint4& v, float* out) {
  const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3)));
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

}  // namespace strata::cuda
