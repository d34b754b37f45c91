// Sparse shared-KV attention with sinks (paper §2.3): each query gathers its own key rows — its sliding window and
// the compressed entries it may see (all HCA entries, the indexer's top-k CSA entries). First version: one block
// per (query, head), fp32, correctness before speed.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 128;

__global__ void sparse_attention_kernel(const float* q, const float* const* keys, const int32_t* key_count,
                                        int64_t max_keys, const float* sinks, float* out, int64_t heads,
                                        int64_t head_dim, float scale) {
  extern __shared__ float shared[];
  float* qs = shared;                 // [head_dim]
  float* logits = shared + head_dim;  // [max_keys]
  const int64_t row = blockIdx.x / heads, head = blockIdx.x % heads;
  const float* qh = q + (row * heads + head) * head_dim;
  const float* const* row_keys = keys + row * max_keys;
  const int n = key_count[row];
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) qs[c] = qh[c];
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int j = warp; j < n; j += warps) {
    const float* k = row_keys[j];
    float acc = 0.0f;
    for (int64_t c = lane; c < head_dim; c += 32) acc += qs[c] * k[c];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) logits[j] = acc * scale;
  }
  __syncthreads();

  // Softmax over the logits and the sink: block-wide max, then block-wide sum (warp shuffles, then across warps).
  __shared__ float partial[kThreads / 32];
  float m = sinks[head];
  for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, logits[j]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  m = partial[0];
  for (int w = 1; w < warps; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();  // everyone has read `partial` before it is reused
  float sum = 0.0f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = expf(logits[j] - m);
    logits[j] = e;
    sum += e;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) partial[warp] = sum;
  __syncthreads();
  float denom = expf(sinks[head] - m);
  for (int w = 0; w < warps; ++w) denom += partial[w];
  for (int j = threadIdx.x; j < n; j += blockDim.x) logits[j] /= denom;
  __syncthreads();

  float* o = out + (row * heads + head) * head_dim;
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < n; ++j) acc += logits[j] * row_keys[j][c];
    o[c] = acc;
  }
}

}  // namespace

void sparse_attention(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                      const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                      cudaStream_t stream) {
  if (rows == 0) return;
  const size_t shared = static_cast<size_t>(head_dim + max_keys) * sizeof(float);
  if (shared > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
  sparse_attention_kernel<<<static_cast<unsigned>(rows * heads), kThreads, shared, stream>>>(
      q, keys, key_count, max_keys, sinks, out, heads, head_dim, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
