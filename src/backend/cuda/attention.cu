// Sparse shared-KV attention with sinks (paper §2.3): each query gathers its own key rows — its sliding window and
// the compressed entries it may see (all HCA entries, the indexer's top-k CSA entries). First version: one block
// per (query, head), fp32, correctness before speed.
#include <cfloat>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

namespace {

constexpr int kThreads = 128;

// Over the block: m = max(m0, logits[0, n)), then logits[j] ← exp(logits[j] − m); returns {m, Σ logits}. The
// softmax of both attention kernels (the one-pass one starts from the sink, a split part from −∞).
__device__ float2 exp_and_sum(float* logits, int n, float m0) {
  __shared__ float partial[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  float m = m0;
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
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += partial[w];
  __syncthreads();
  return make_float2(m, total);
}

__global__ void sparse_attention_kernel(const float* q, const float* const* keys, const int32_t* key_count,
                                        int64_t max_keys, const float* sinks, float* out, int64_t heads,
                                        int64_t head_dim, float scale) {
  extern __shared__ float shared[];
  // The key row addresses first (8-byte aligned at the start), then q and the logits.
  const float** kp = reinterpret_cast<const float**>(shared);     // [max_keys]
  float* qs = shared + 2 * max_keys;                              // [head_dim]
  float* logits = qs + head_dim;                                  // [max_keys]
  const int64_t row = blockIdx.x / heads, head = blockIdx.x % heads;
  const float* qh = q + (row * heads + head) * head_dim;
  const float* const* row_keys = keys + row * max_keys;
  const int n = key_count[row];
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) qs[c] = qh[c];
  for (int j = threadIdx.x; j < n; j += blockDim.x) kp[j] = row_keys[j];
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int j = warp; j < n; j += warps) {
    const float* k = kp[j];
    float acc = 0.0f;
    for (int64_t c = lane; c < head_dim; c += 32) acc += qs[c] * k[c];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) logits[j] = acc * scale;
  }
  __syncthreads();

  // Softmax over the logits and the sink (which takes mass but adds no value).
  const float2 stats = exp_and_sum(logits, n, sinks[head]);
  const float denom = expf(sinks[head] - stats.x) + stats.y;
  for (int j = threadIdx.x; j < n; j += blockDim.x) logits[j] /= denom;
  __syncthreads();

  float* o = out + (row * heads + head) * head_dim;
  // Keys in order (the same sums as one key at a time), four keys' loads in flight together.
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
    float acc = 0.0f;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
      const float a = kp[j][c], b = kp[j + 1][c], d = kp[j + 2][c], e = kp[j + 3][c];
      acc += logits[j] * a;
      acc += logits[j + 1] * b;
      acc += logits[j + 2] * d;
      acc += logits[j + 3] * e;
    }
    for (; j < n; ++j) acc += logits[j] * kp[j][c];
    o[c] = acc;
  }
}

// Decode-sized steps: the keys of each (query, head) are split over blocks of kSplitKeys (a query of 640 keys and
// 64 heads then fills the GPU instead of 64 blocks). Each block returns its keys' max logit, Σexp and unnormalised
// output; attention_merge_kernel rescales and adds the parts with the sink. Equal to the one-pass softmax up to
// rounding.
constexpr int kSplitKeys = 64;

__global__ void attention_split_kernel(const float* q, const float* const* keys, const int32_t* key_count,
                                       int64_t max_keys, float* part_out, float* part_stats, int64_t heads,
                                       int64_t head_dim, float scale) {
  extern __shared__ float4 shared4[];
  float4* qs = shared4;                                               // [head_dim / 4]
  float* logits = reinterpret_cast<float*>(shared4 + head_dim / 4);  // [kSplitKeys]
  __shared__ const float4* kp[kSplitKeys];                            // this part's key rows
  const int64_t rh = blockIdx.x, row = rh / heads, part = rh * gridDim.y + blockIdx.y, d4 = head_dim / 4;
  const float* const* row_keys = keys + row * max_keys;
  const int n = key_count[row];
  const int j0 = static_cast<int>(blockIdx.y) * kSplitKeys, j1 = min(j0 + kSplitKeys, n);
  float4* o = reinterpret_cast<float4*>(part_out + part * head_dim);
  if (j0 >= j1) {  // the whole block: no keys in this part
    if (threadIdx.x == 0) part_stats[2 * part] = -FLT_MAX, part_stats[2 * part + 1] = 0.0f;
    return;
  }
  const float4* qh = reinterpret_cast<const float4*>(q + rh * head_dim);
  for (int64_t c = threadIdx.x; c < d4; c += blockDim.x) qs[c] = qh[c];
  for (int j = j0 + static_cast<int>(threadIdx.x); j < j1; j += blockDim.x)
    kp[j - j0] = reinterpret_cast<const float4*>(row_keys[j]);
  __syncthreads();
  // Logits: a warp per key, lanes over 16-byte vectors of the head dimension.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  // Two keys per pass, so each lane has both keys' loads in flight together.
  for (int j = warp; j < j1 - j0; j += 2 * warps) {
    const bool second = j + warps < j1 - j0;
    const float4* k = kp[j];
    const float4* k2 = second ? kp[j + warps] : k;
    float acc = 0.0f, acc2 = 0.0f;
    for (int64_t c = lane; c < d4; c += 32) {
      const float4 kv = k[c], kv2 = k2[c], qv = qs[c];
      acc += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
      acc2 += qv.x * kv2.x + qv.y * kv2.y + qv.z * kv2.z + qv.w * kv2.w;
    }
    for (int off = 16; off > 0; off >>= 1) {
      acc += __shfl_xor_sync(0xffffffffu, acc, off);
      acc2 += __shfl_xor_sync(0xffffffffu, acc2, off);
    }
    if (lane == 0) {
      logits[j] = acc * scale;
      if (second) logits[j + warps] = acc2 * scale;
    }
  }
  __syncthreads();
  const float2 stats = exp_and_sum(logits, j1 - j0, -FLT_MAX);
  if (threadIdx.x == 0) part_stats[2 * part] = stats.x, part_stats[2 * part + 1] = stats.y;
  // Σ p_j · k_j: each thread a 16-byte column vector, four keys' loads in flight at a time.
  const int count = j1 - j0;
  for (int64_t c = threadIdx.x; c < d4; c += blockDim.x) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int j = 0;
    for (; j + 4 <= count; j += 4) {
      const float4 a = kp[j][c], b = kp[j + 1][c], cc = kp[j + 2][c], d = kp[j + 3][c];
      const float pa = logits[j], pb = logits[j + 1], pc = logits[j + 2], pd = logits[j + 3];
      acc.x += pa * a.x + pb * b.x + pc * cc.x + pd * d.x;
      acc.y += pa * a.y + pb * b.y + pc * cc.y + pd * d.y;
      acc.z += pa * a.z + pb * b.z + pc * cc.z + pd * d.z;
      acc.w += pa * a.w + pb * b.w + pc * cc.w + pd * d.w;
    }
    for (; j < count; ++j) {
      const float4 a = kp[j][c];
      const float p = logits[j];
      acc.x += p * a.x;
      acc.y += p * a.y;
      acc.z += p * a.z;
      acc.w += p * a.w;
    }
    o[c] = acc;
  }
}

__global__ void attention_merge_kernel(const float* part_out, const float* part_stats, int64_t parts,
                                       const float* sinks, float* out, int64_t heads, int64_t head_dim) {
  const int64_t rh = blockIdx.x, head = rh % heads;
  const float* st = part_stats + rh * parts * 2;
  float m = sinks[head];
  for (int64_t p = 0; p < parts; ++p) m = fmaxf(m, st[2 * p]);
  float denom = expf(sinks[head] - m);
  for (int64_t p = 0; p < parts; ++p) denom += st[2 * p + 1] > 0.0f ? expf(st[2 * p] - m) * st[2 * p + 1] : 0.0f;
  for (int64_t c = threadIdx.x; c < head_dim; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t p = 0; p < parts; ++p)
      if (st[2 * p + 1] > 0.0f) acc += expf(st[2 * p] - m) * part_out[(rh * parts + p) * head_dim + c];
    out[rh * head_dim + c] = acc / denom;
  }
}

}  // namespace

void sparse_attention(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                      const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                      cudaStream_t stream) {
  if (rows == 0) return;
  const size_t shared = static_cast<size_t>(head_dim + 3 * max_keys) * sizeof(float);
  if (shared > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(sparse_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
  sparse_attention_kernel<<<static_cast<unsigned>(rows * heads), kThreads, shared, stream>>>(
      q, keys, key_count, max_keys, sinks, out, heads, head_dim, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

int64_t attention_split_floats(int64_t rows, int64_t heads, int64_t head_dim, int64_t max_keys) {
  const int64_t parts = (max_keys + kSplitKeys - 1) / kSplitKeys;
  return rows * heads * parts * (head_dim + 2);
}

void sparse_attention_split(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                            const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                            float* scratch, cudaStream_t stream) {
  if (rows == 0 || max_keys == 0) return sparse_attention(q, keys, key_count, max_keys, sinks, out, rows, heads,
                                                          head_dim, scale, stream);
  const int64_t parts = (max_keys + kSplitKeys - 1) / kSplitKeys;
  float* part_out = scratch;
  float* part_stats = scratch + rows * heads * parts * head_dim;
  if (head_dim % 4 != 0) fail("sparse attention: head_dim ", head_dim, " is not a multiple of 4");
  const size_t shared = static_cast<size_t>(head_dim + kSplitKeys) * sizeof(float);
  if (shared > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(attention_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
  attention_split_kernel<<<dim3(static_cast<unsigned>(rows * heads), static_cast<unsigned>(parts)), kThreads, shared,
                           stream>>>(q, keys, key_count, max_keys, part_out, part_stats, heads, head_dim, scale);
  STRATA_CUDA_CHECK_LAUNCH();
  attention_merge_kernel<<<static_cast<unsigned>(rows * heads), kThreads, 0, stream>>>(part_out, part_stats, parts,
                                                                                        sinks, out, heads, head_dim);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
