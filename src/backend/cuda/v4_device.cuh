#pragma once
// What the V4 kernel files (linear.cuh, mhc.cuh, compressor.cuh, indexer.cuh, attention_keys.cuh, router.cuh,
// moe_experts.cuh) share: the launch width, a block-wide sum, the sigmoid, the address of a compressed entry.
// Device code in an anonymous namespace: included only by those files, all compiled through v4_kernels.cu.
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/step_layout.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n, int threads = kThreads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the total.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? partial[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

__device__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ const float* entry_address(const EntryTable& t, int64_t chunk, int64_t n) {
  const int32_t page = t.pages[chunk * t.max_pages + n / t.per_page];
  return t.arena + static_cast<int64_t>(page) * t.page_floats + (n % t.per_page) * t.dim;
}

}  // namespace

}  // namespace strata::cuda
