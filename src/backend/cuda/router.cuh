#pragma once
// Kernels of router.h: the router's scores and top-k (or hash) selection.
// Compiled once, through v4_kernels.cu (one nvcc translation unit for every V4 kernel: see there).
#include "backend/cuda/router.h"
#include "backend/cuda/v4_device.cuh"

namespace strata::cuda {

namespace {

// One thread per row (experts ≤ a few hundred, k ≤ 16): the CPU's scoring and selection, in its order.
// One warp per row: lanes score their experts (e ≡ lane mod 32), then k rounds of a warp-wide argmax pick the
// experts in the CPU's order (higher biased score first, lower index on ties).
constexpr int kMaxExpertsPerToken = 16;
__global__ void route_kernel(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
                             int64_t rows, int64_t experts, int64_t k, int scoring_func, float routed_scaling,
                             float* scores, int32_t* ids, float* weights) {
  const int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // the whole warp
  const float* in = logits + r * experts;
  float* s = scores + r * experts;
  if (scoring_func == 2) {  // softmax
    float m = -FLT_MAX, sum = 0.0f;
    for (int64_t e = lane; e < experts; e += 32) m = fmaxf(m, in[e]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    for (int64_t e = lane; e < experts; e += 32) sum += expf(in[e] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    for (int64_t e = lane; e < experts; e += 32) s[e] = expf(in[e] - m) / sum;
  } else {
    for (int64_t e = lane; e < experts; e += 32) {
      const float x = in[e];
      s[e] = scoring_func == 0 ? sqrtf(x > 20.0f ? x : log1pf(expf(x))) : 1.0f / (1.0f + expf(-x));
    }
  }
  __syncwarp();
  int32_t* chosen = ids + r * k;
  int32_t mine[kMaxExpertsPerToken];
  if (tid2eid) {
    for (int64_t j = 0; j < k; ++j) mine[j] = tid2eid[static_cast<int64_t>(tokens[r]) * k + j];
  } else {
    for (int64_t j = 0; j < k; ++j) {
      float best_v = -FLT_MAX;
      int32_t best = INT32_MAX;
      for (int64_t e = lane; e < experts; e += 32) {
        bool taken = false;
        for (int64_t p = 0; p < j; ++p) taken |= mine[p] == e;
        const float v = s[e] + (bias ? bias[e] : 0.0f);
        if (!taken && (best == INT32_MAX || v > best_v)) best = static_cast<int32_t>(e), best_v = v;
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
        const int32_t oe = __shfl_xor_sync(0xffffffffu, best, o);
        if (oe != INT32_MAX && (best == INT32_MAX || ov > best_v || (ov == best_v && oe < best))) best = oe, best_v = ov;
      }
      mine[j] = best;
    }
  }
  if (lane == 0) {
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += s[mine[j]];
    for (int64_t j = 0; j < k; ++j) {
      chosen[j] = mine[j];
      weights[r * k + j] = s[mine[j]] / (sum + 1e-20f) * routed_scaling;
    }
  }
}

}  // namespace

void route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens, int64_t rows,
           int64_t experts, int64_t k, int scoring_func, float routed_scaling, float* scores, int32_t* ids,
           float* weights, cudaStream_t stream) {
  if (rows == 0) return;
  if (k > kMaxExpertsPerToken) fail("route: ", k, " experts per token above the CUDA backend's limit of ", kMaxExpertsPerToken);
  route_kernel<<<blocks_for(rows * 32, kThreads), kThreads, 0, stream>>>(logits, bias, tid2eid, tokens, rows, experts, k,
                                                                        scoring_func, routed_scaling, scores, ids,
                                                                        weights);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
