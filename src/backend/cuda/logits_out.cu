#include <cmath>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/logits_out.h"

namespace strata::cuda {

namespace {

constexpr int kArgmaxThreads = 1024;

struct Best {
  float value;
  int32_t index;
};

// The better of two candidates: the larger value, on a tie the lower index.
__device__ inline Best better(Best a, Best b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

// One block per listed row: each thread scans a strided slice, then warps and the block reduce (value, index).
__global__ void argmax_rows_kernel(const float* __restrict__ x, int64_t cols, const int32_t* __restrict__ rows,
                                   int32_t* __restrict__ out) {
  const float* row = x + static_cast<int64_t>(rows[blockIdx.x]) * cols;
  Best best{-INFINITY, INT32_MAX};
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) best = better(best, {row[c], static_cast<int32_t>(c)});
  for (int offset = 16; offset > 0; offset /= 2) {
    Best other{__shfl_down_sync(0xffffffffu, best.value, offset), __shfl_down_sync(0xffffffffu, best.index, offset)};
    best = better(best, other);
  }
  __shared__ Best warp_best[kArgmaxThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = lane < blockDim.x / 32 ? warp_best[lane] : Best{-INFINITY, INT32_MAX};
    for (int offset = 16; offset > 0; offset /= 2) {
      Best other{__shfl_down_sync(0xffffffffu, best.value, offset), __shfl_down_sync(0xffffffffu, best.index, offset)};
      best = better(best, other);
    }
    // A row of NaNs (or only -inf) keeps no candidate: column 0, as std::max_element answers.
    if (lane == 0) out[blockIdx.x] = best.index == INT32_MAX ? 0 : best.index;
  }
}

// One block per listed row: the row's maximum (block reduction), then Σ exp(x − max) in double.
__global__ void top_probability_kernel(const float* __restrict__ x, int64_t cols, const int32_t* __restrict__ rows,
                                       float* __restrict__ out) {
  const float* row = x + static_cast<int64_t>(rows[blockIdx.x]) * cols;
  __shared__ float warp_max[kArgmaxThreads / 32];
  __shared__ double warp_sum[kArgmaxThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float top = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) top = fmaxf(top, row[c]);
  for (int offset = 16; offset > 0; offset /= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
  if (lane == 0) warp_max[warp] = top;
  __syncthreads();
  top = lane < warps ? warp_max[lane] : -INFINITY;
  for (int offset = 16; offset > 0; offset /= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
  if (!isfinite(top)) {
    if (threadIdx.x == 0) out[blockIdx.x] = 0.0f;
    return;
  }
  double z = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) z += exp(static_cast<double>(row[c]) - static_cast<double>(top));
  for (int offset = 16; offset > 0; offset /= 2) z += __shfl_xor_sync(0xffffffffu, z, offset);
  if (lane == 0) warp_sum[warp] = z;
  __syncthreads();
  if (warp == 0) {
    z = lane < warps ? warp_sum[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) z += __shfl_xor_sync(0xffffffffu, z, offset);
    if (lane == 0) out[blockIdx.x] = static_cast<float>(1.0 / z);
  }
}

}  // namespace

void top_probability_rows(const float* x, int64_t cols, const int32_t* rows, int64_t count, float* out,
                          cudaStream_t stream) {
  if (count == 0) return;
  top_probability_kernel<<<static_cast<unsigned>(count), kArgmaxThreads, 0, stream>>>(x, cols, rows, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

void argmax_rows(const float* x, int64_t cols, const int32_t* rows, int64_t count, int32_t* out, cudaStream_t stream) {
  if (count == 0) return;
  argmax_rows_kernel<<<static_cast<unsigned>(count), kArgmaxThreads, 0, stream>>>(x, cols, rows, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

HostStaging::~HostStaging() {
  if (data_) cudaFreeHost(data_);
}

void* HostStaging::bytes(size_t n) {
  if (n > size_) {
    if (data_) STRATA_CUDA_CHECK(cudaFreeHost(data_));
    data_ = nullptr;
    size_ = 0;
    STRATA_CUDA_CHECK(cudaMallocHost(&data_, n));
    size_ = n;
  }
  return data_;
}

}  // namespace strata::cuda
