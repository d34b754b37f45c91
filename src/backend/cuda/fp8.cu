#include "backend/cuda/fp8.h"

#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/gemv.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = 8;   // gemv_fp8: one warp per output channel, as gemv.cu
constexpr int kUnroll = 4;  // 16-byte weight vectors in flight per lane

// One warp per (row, 128-column block): each lane holds 4 of the block's values.
// Rows m..padded-1 are zeros.
__global__ void quantize_fp8_rows_kernel(const float* x, int64_t ldx, int64_t m, int64_t padded, int64_t k,
                                         uint8_t* codes, float* scales) {
  const int64_t blocks = (k + kFp8Block - 1) / kFp8Block;
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (item >= padded * blocks) return;
  const int64_t row = item / blocks, block = item % blocks;
  const int64_t c0 = block * kFp8Block + lane * 4;
  float v[4];
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[j] = c0 + j < k && row < m ? x[row * ldx + c0 + j] : 0.0f;
    amax = fmaxf(amax, fabsf(v[j]));
  }
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  // max(amax, 1e-30): a block of zeros gets a tiny positive scale and zero codes, never a division by zero.
  const float scale = fmaxf(amax, 1e-30f) / kFp8Max;
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (c0 + j < k) codes[row * k + c0 + j] = __nv_cvt_float_to_fp8(v[j] / scale, __NV_SATFINITE, __NV_E4M3);
  if (lane == 0) scales[block * padded + row] = scale;
}

__global__ void dequantize_fp8_kernel(const uint8_t* w, const float* scales, int64_t rows, int64_t cols,
                                      __nv_bfloat16* out) {
  const int64_t scale_cols = (cols + kFp8Block - 1) / kFp8Block;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float v = __half2float(__half(__nv_cvt_fp8_to_halfraw(w[i], __NV_E4M3)));
    out[i] = __float2bfloat16(v * scales[(r / kFp8Block) * scale_cols + c / kFp8Block]);
  }
}

__global__ void widen_bf16_rows_kernel(const __nv_bfloat16* x, int64_t m, int64_t n, float* y, int64_t ldy) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < m * n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[(i / n) * ldy + i % n] = __bfloat162float(x[i]);
}

// gemv.cu's kernel with e4m3 weights: a lane's 16-byte vector is 16 weights (twice bf16's), all inside one
// 128-column block, so one scale multiplies the vector's partial dot product.
template <int M>
__global__ void gemv_fp8_kernel(const __nv_bfloat16* x, int64_t ldx, int64_t stride_x, const uint8_t* w, int64_t ldw,
                                int64_t stride_w, const float* scales, int64_t scale_cols, int64_t stride_s, float* y,
                                int64_t ldy, int64_t stride_y, int m, int64_t n, int64_t k) {
  constexpr int kVec = 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= n) return;
  const int64_t g = blockIdx.y;
  x += g * stride_x;
  y += g * stride_y;
  const uint8_t* wr = w + g * stride_w + row * ldw;
  const float* sr = scales + g * stride_s + (row / kFp8Block) * scale_cols;
  float acc[M] = {};
  for (int64_t c0 = static_cast<int64_t>(lane) * kVec; c0 < k; c0 += 32 * kVec * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * 32 * kVec;
      if (c < k) wv[u] = *reinterpret_cast<const uint4*>(wr + c);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * 32 * kVec;
      if (c >= k) break;
      float wf[kVec];
      fp8x16_to_float(wv[u], wf);
      const float s = sr[c / kFp8Block];
#pragma unroll
      for (int t = 0; t < M; ++t) {
        if (t >= m) break;
        uint4 xv[2];
        xv[0] = *reinterpret_cast<const uint4*>(x + t * ldx + c);
        xv[1] = *reinterpret_cast<const uint4*>(x + t * ldx + c + 8);
        const auto* xt = reinterpret_cast<const __nv_bfloat16*>(xv);
        float part = 0.0f;
#pragma unroll
        for (int v = 0; v < kVec; ++v) part += wf[v] * __bfloat162float(xt[v]);
        acc[t] += s * part;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < M; ++t) {
    for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
    if (lane == 0 && t < m) y[t * ldy + row] = acc[t];
  }
}

template <int M>
void launch_gemv_fp8(const __nv_bfloat16* x, int64_t ldx, int64_t stride_x, const uint8_t* w, int64_t ldw,
                     int64_t stride_w, const float* scales, int64_t scale_cols, int64_t stride_s, float* y, int64_t ldy,
                     int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + kWarps - 1) / kWarps), static_cast<unsigned>(batch));
  gemv_fp8_kernel<M><<<grid, kWarps * 32, 0, stream>>>(x, ldx, stride_x, w, ldw, stride_w, scales, scale_cols,
                                                       stride_s, y, ldy, stride_y, static_cast<int>(m), n, k);
  STRATA_CUDA_CHECK_LAUNCH();
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void quantize_fp8_rows(const float* x, int64_t ldx, int64_t m, int64_t k, uint8_t* codes, float* scales,
                       cudaStream_t stream) {
  const int64_t padded = fp8_padded_rows(m), warps = padded * ((k + kFp8Block - 1) / kFp8Block);
  if (warps == 0) return;
  quantize_fp8_rows_kernel<<<static_cast<unsigned>((warps * 32 + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      x, ldx, m, padded, k, codes, scales);
  STRATA_CUDA_CHECK_LAUNCH();
}

void dequantize_fp8(const uint8_t* w, const float* scales, int64_t rows, int64_t cols, __nv_bfloat16* out,
                    cudaStream_t stream) {
  if (rows * cols == 0) return;
  dequantize_fp8_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(w, scales, rows, cols, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

void widen_bf16_rows(const __nv_bfloat16* x, int64_t m, int64_t n, float* y, int64_t ldy, cudaStream_t stream) {
  if (m * n == 0) return;
  widen_bf16_rows_kernel<<<grid_for(m * n), kThreads, 0, stream>>>(x, m, n, y, ldy);
  STRATA_CUDA_CHECK_LAUNCH();
}

bool gemv_fp8_applies(const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w,
                      int64_t m, int64_t k) {
  // 16 weights per vector: their 16 bf16 activations are two 16-byte loads.
  return m >= 1 && m <= kGemvMaxRows && k % 16 == 0 && ldx % 8 == 0 && stride_x % 8 == 0 && ldw % 16 == 0 &&
         stride_w % 16 == 0 && aligned16(x) && aligned16(w);
}

void gemv_fp8(const __nv_bfloat16* x, int64_t ldx, int64_t stride_x, const uint8_t* w, int64_t ldw, int64_t stride_w,
              const float* scales, int64_t scale_cols, int64_t stride_s, float* y, int64_t ldy, int64_t stride_y,
              int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (m <= 1)
    launch_gemv_fp8<1>(x, ldx, stride_x, w, ldw, stride_w, scales, scale_cols, stride_s, y, ldy, stride_y, m, n, k,
                       batch, stream);
  else if (m <= 2)
    launch_gemv_fp8<2>(x, ldx, stride_x, w, ldw, stride_w, scales, scale_cols, stride_s, y, ldy, stride_y, m, n, k,
                       batch, stream);
  else if (m <= 4)
    launch_gemv_fp8<4>(x, ldx, stride_x, w, ldw, stride_w, scales, scale_cols, stride_s, y, ldy, stride_y, m, n, k,
                       batch, stream);
  else
    launch_gemv_fp8<8>(x, ldx, stride_x, w, ldw, stride_w, scales, scale_cols, stride_s, y, ldy, stride_y, m, n, k,
                       batch, stream);
}

}  // namespace strata::cuda
