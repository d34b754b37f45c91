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

// cos/sin[r, i] of row r's position: the host's RopeTable::cos_sin (fp32 angle, cos and sin in double, times the
// scaling in fp32), for a step's rows at once.
__global__ void rope_cos_sin_kernel(const int32_t* position, int64_t rows, const float* inv_freq, int64_t half,
                                    float scaling, float* cos_out, float* sin_out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * half) return;
  const float angle = inv_freq[i % half] * static_cast<float>(position[i / half]);
  cos_out[i] = static_cast<float>(cos(static_cast<double>(angle))) * scaling;
  sin_out[i] = static_cast<float>(sin(static_cast<double>(angle))) * scaling;
}

}  // namespace

void rope_cos_sin(const int32_t* position, int64_t rows, const float* inv_freq, int64_t half, float scaling,
                  float* cos, float* sin, cudaStream_t stream) {
  if (rows * half == 0) return;
  rope_cos_sin_kernel<<<static_cast<unsigned>((rows * half + 255) / 256), 256, 0, stream>>>(position, rows, inv_freq,
                                                                                          half, scaling, cos, sin);
  STRATA_CUDA_CHECK_LAUNCH();
}

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
