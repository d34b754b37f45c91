// RMSNorm and interleaved RoPE: memory-bound elementwise kernels (fp32 for now; bf16 activations come with the
// fused forward).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

namespace {

constexpr int kNormThreads = 256;

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __shared__ float total;
  if (threadIdx.x == 0) total = v;
  __syncthreads();
  return total;
}

__global__ void rms_norm_kernel(const float* x, const float* weight, float* y, int64_t cols, float eps) {
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = xr[c] * inv;
    yr[c] = weight ? weight[c] * v : v;
  }
}

__global__ void rope_kernel(float* x, int64_t rows, int64_t heads, int64_t head_stride, int64_t offset, int64_t half,
                            const float* cos, const float* sin, bool inverse) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * heads * half) return;
  const int64_t pair = i % half, head = (i / half) % heads, row = i / (half * heads);
  float* p = x + row * heads * head_stride + head * head_stride + offset + 2 * pair;
  const float c = cos[row * half + pair], s = inverse ? -sin[row * half + pair] : sin[row * half + pair];
  const float a = p[0], b = p[1];
  p[0] = a * c - b * s;
  p[1] = b * c + a * s;
}

}  // namespace

void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  // A few long rows (a decode step's hidden states) get wide blocks; many rows (per-head norms, prefill) narrow ones.
  const int threads = rows < 64 && cols >= 2048 ? 1024 : kNormThreads;
  rms_norm_kernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(x, weight, y, cols, eps);
  STRATA_CUDA_CHECK_LAUNCH();
}

void rope_interleaved(float* x, int64_t rows, int64_t heads, int64_t head_stride, int64_t offset, int64_t half,
                      const float* cos, const float* sin, bool inverse, cudaStream_t stream) {
  const int64_t n = rows * heads * half;
  if (n == 0) return;
  const int threads = 256;
  rope_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(x, rows, heads, head_stride,
                                                                                          offset, half, cos, sin, inverse);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
