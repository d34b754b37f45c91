#pragma once
// Kernels of mhc.h: mHC's pre mix, collapse and stream update, and the HyperHead.
// Compiled once, through v4_kernels.cu (one nvcc translation unit for every V4 kernel: see there).
#include "backend/cuda/mhc.h"
#include "backend/cuda/v4_device.cuh"

namespace strata::cuda {

namespace {

// mHC mixes in two steps, so a decode step of a few rows still spreads over the GPU. Step 1: block (r, g, s) takes
// columns [s·kMixSplit, (s+1)·kMixSplit) of row r's streams and returns that slice's Σx² and its dot products with
// fn rows [g·kMixGroup, (g+1)·kMixGroup); step 2 adds the slices in a fixed order (deterministic, batch-invariant).
constexpr int64_t kMixSplit = 512, kMixGroup = 8;

int64_t mix_splits(int64_t width) { return (width + kMixSplit - 1) / kMixSplit; }

// partial[r, s, 0] = Σx² of the slice; partial[r, s, 1 + i] = fn[i] · x over the slice. `rows` (optional) maps
// the grid's row to a streams row.
__global__ void mix_partials_kernel(const float* streams, const int32_t* rows, const float* fn, int64_t width,
                                    int64_t n, float* partial) {
  const int64_t r = blockIdx.x, g = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const float* x = streams + (rows ? static_cast<int64_t>(rows[r]) : r) * width;
  const int64_t c0 = split * kMixSplit, c1 = min(c0 + kMixSplit, width);
  const int64_t i0 = g * kMixGroup, i1 = min(i0 + kMixGroup, n);
  float ss = 0.0f, acc[kMixGroup] = {};
  for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
    const float v = x[c];
    ss += v * v;
#pragma unroll
    for (int64_t i = 0; i < kMixGroup; ++i)
      if (i0 + i < i1) acc[i] += fn[(i0 + i) * width + c] * v;
  }
  float* out = partial + (r * splits + split) * (1 + n);
  ss = block_sum(ss);
  if (g == 0 && threadIdx.x == 0) out[0] = ss;
  for (int64_t i = 0; i < kMixGroup && i0 + i < i1; ++i) {
    const float total = block_sum(acc[i]);
    if (threadIdx.x == 0) out[1 + i0 + i] = total;
  }
}

// The same one-slice layout from products already made (a GEMM over many rows): partial[r, 0, 0] = Σx² of row r,
// partial[r, 0, 1 + i] = mixes[r, i].
__global__ void mix_from_products_kernel(const float* streams, const float* mixes, int64_t width, int64_t n,
                                         float* partial) {
  const int64_t r = blockIdx.x;
  const float* x = streams + r * width;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) ss += x[c] * x[c];
  ss = block_sum(ss);
  float* out = partial + r * (1 + n);
  if (threadIdx.x == 0) out[0] = ss;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[1 + i] = mixes[r * n + i];
}

// mix[i] = fn[i] · rmsnorm(x) of row r from its slices, by one warp (lanes over the n + 1 sums, each adding its
// slices in order: all loads in flight at once), into shared `mix` (n values); __syncwarp after.
__device__ void warp_mixes(const float* partial, int64_t r, int64_t splits, int64_t n, int64_t width, float eps,
                           float* mix) {
  const int lane = threadIdx.x % 32;
  const float* p = partial + r * splits * (1 + n);
  float inv = 0.0f;
  for (int64_t i0 = 0; i0 <= n; i0 += 32) {
    const int64_t i = i0 + lane;
    float v = 0.0f;
    if (i <= n) {
      // Eight loads issued before their sums: a plain loop would wait out one load's latency per slice.
      int64_t s = 0;
      for (; s + 8 <= splits; s += 8) {
        float part[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) part[u] = p[(s + u) * (1 + n) + i];
#pragma unroll
        for (int u = 0; u < 8; ++u) v += part[u];
      }
      for (; s < splits; ++s) v += p[s * (1 + n) + i];
    }
    if (i0 == 0) inv = rsqrtf(__shfl_sync(0xffffffffu, v, 0) / static_cast<float>(width) + eps);
    if (i >= 1 && i <= n) mix[i - 1] = v * inv;
  }
  __syncwarp();
}

// Step 2 of hc_pre, one warp per row: pre/post, comb by softmax and Sinkhorn (lanes own rows, then columns, of the
// hc×hc matrix). Step 3 (hc_collapse_kernel) spreads the collapse Σ_h pre[h] · stream h over the GPU.
__global__ void hc_pre_kernel(const float* partial, int64_t splits, const float* base, const float* scale,
                              float* mix_out, float* pre_out, int64_t hc, int64_t d, float norm_eps, float hc_eps,
                              int64_t sinkhorn_iters) {
  __shared__ float mix[(2 + 8) * 8];
  __shared__ float comb[8 * 8];  // the Sinkhorn iterations stay in shared memory
  const int64_t r = blockIdx.x, width = hc * d, mix_n = (2 + hc) * hc;
  warp_mixes(partial, r, splits, mix_n, width, norm_eps, mix);
  float* post = mix_out + r * (hc + hc * hc);
  const int lane = threadIdx.x;
  if (lane < hc) {
    pre_out[r * hc + lane] = sigmoidf(mix[lane] * scale[0] + base[lane]) + hc_eps;
    post[lane] = 2.0f * sigmoidf(mix[hc + lane] * scale[1] + base[hc + lane]);
    // Row `lane` of comb: softmax over its hc entries.
    float* row = comb + lane * hc;
    float m = -FLT_MAX, sum = 0.0f;
    for (int64_t j = 0; j < hc; ++j) row[j] = mix[2 * hc + lane * hc + j] * scale[2] + base[2 * hc + lane * hc + j];
    for (int64_t j = 0; j < hc; ++j) m = fmaxf(m, row[j]);
    for (int64_t j = 0; j < hc; ++j) sum += expf(row[j] - m);
    for (int64_t j = 0; j < hc; ++j) row[j] = expf(row[j] - m) / sum + hc_eps;
  }
  __syncwarp();
  const int64_t iters = sinkhorn_iters > 1 ? sinkhorn_iters : 1;
  if (hc * hc <= 32) {
    // Sinkhorn-Knopp in registers: lane i·hc + j holds comb[i][j] and gathers its row's or column's entries by
    // shuffles, adding them in the CPU reference's order (so the same sums as the shared-memory loop below).
    const int i = lane / static_cast<int>(hc), j = lane % static_cast<int>(hc);
    const bool mine = lane < hc * hc;
    float v = mine ? comb[lane] : 0.0f;
    for (int64_t it = 0; it < iters; ++it) {
      if (it > 0) {
        float sum = 0.0f;
        for (int jj = 0; jj < hc; ++jj) sum += __shfl_sync(0xffffffffu, v, mine ? i * static_cast<int>(hc) + jj : 0);
        v /= sum + hc_eps;
      }
      float sum = 0.0f;
      for (int ii = 0; ii < hc; ++ii) sum += __shfl_sync(0xffffffffu, v, mine ? ii * static_cast<int>(hc) + j : 0);
      v /= sum + hc_eps;
    }
    if (mine) post[hc + lane] = v;
    return;
  }
  // Sinkhorn-Knopp as the CPU reference: columns once, then (rows, columns) sinkhorn_iters − 1 times.
  for (int64_t it = 0; it < iters; ++it) {
    if (it > 0) {
      if (lane < hc) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) sum += comb[lane * hc + j];
        for (int64_t j = 0; j < hc; ++j) comb[lane * hc + j] /= sum + hc_eps;
      }
      __syncwarp();
    }
    if (lane < hc) {
      float sum = 0.0f;
      for (int64_t i = 0; i < hc; ++i) sum += comb[i * hc + lane];
      for (int64_t i = 0; i < hc; ++i) comb[i * hc + lane] /= sum + hc_eps;
    }
    __syncwarp();
  }
  for (int64_t i = lane; i < hc * hc; i += 32) post[hc + i] = comb[i];
}

// out[i, k] = Σ_h pre[i, h] · streams[row_i, h·d + k], row_i = rows[i] (or i): blocks over (row, column slice).
__global__ void hc_collapse_kernel(const float* streams, const int32_t* rows, const float* pre, float* out,
                                   int64_t hc, int64_t d) {
  const int64_t i = blockIdx.x, k = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (k >= d) return;
  const float* x = streams + (rows ? static_cast<int64_t>(rows[i]) : i) * hc * d;
  float acc = 0.0f;
  for (int64_t h = 0; h < hc; ++h) acc += pre[i * hc + h] * x[h * d + k];
  out[i * d + k] = acc;
}

// One block per row (rows may exceed the 65,535 limit of a grid's y dimension), threads over the hidden size.
__global__ void hc_post_kernel(const float* mix, const float* block_out, float* streams, int64_t hc, int64_t d) {
  const int64_t r = blockIdx.x;
  const float* post = mix + r * (hc + hc * hc);
  const float* comb = post + hc;
  float* x = streams + r * hc * d;
  // blockIdx.y: a slice of kThreads columns, so a decode step's few rows still spread over the GPU.
  for (int64_t e = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < d; e += gridDim.y * blockDim.x) {
    float old[8];  // hc ≤ 8 (checked by the launcher)
    for (int64_t j = 0; j < hc; ++j) old[j] = x[j * d + e];
    const float out = block_out[r * d + e];
    for (int64_t k = 0; k < hc; ++k) {
      float acc = 0.0f;
      for (int64_t j = 0; j < hc; ++j) acc += comb[j * hc + k] * old[j];
      x[k * d + e] = post[k] * out + acc;
    }
  }
}

// The HyperHead's pre weights, one warp per asked-for row (its collapse is hc_collapse_kernel).
__global__ void hyper_head_kernel(const float* partial, int64_t splits, const float* base, const float* scale,
                                  float* pre_out, int64_t hc, int64_t d, float norm_eps, float hc_eps) {
  __shared__ float pre[8];
  warp_mixes(partial, blockIdx.x, splits, hc, hc * d, norm_eps, pre);
  if (threadIdx.x < hc) pre_out[blockIdx.x * hc + threadIdx.x] = sigmoidf(pre[threadIdx.x] * scale[0] + base[threadIdx.x]) + hc_eps;
}

// One block row per output row and stream (blockIdx.x = r·hc + k), threads over d: out's row r, stream k is
// per_stream's row r·hc + k, so both are the same flat index.
__global__ void join_streams_kernel(const float* per_stream, const float* shared, float* out, int64_t hc, int64_t d) {
  const int64_t rk = blockIdx.x, r = rk / hc;
  for (int64_t j = blockIdx.y * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < d; j += gridDim.y * blockDim.x)
    out[rk * d + j] = per_stream[rk * d + j] + shared[r * d + j];
}

}  // namespace

// The partial sums, then each row's hc pre weights after them.
int64_t mix_partial_floats(int64_t rows, int64_t n, int64_t width) { return rows * mix_splits(width) * (1 + n) + rows * 8; }

void hc_pre(const float* streams, const float* fn, const float* base, const float* scale, float* collapsed,
            float* mix_out, int64_t rows, int64_t hc, int64_t d, float norm_eps, float hc_eps, int64_t sinkhorn_iters,
            float* partial, cudaStream_t stream, const float* mixes) {
  if (rows == 0) return;
  if (hc > 8) fail("hc_pre: hc_mult ", hc, " above the CUDA backend's limit of 8");
  const int64_t n = (2 + hc) * hc, splits = mixes ? 1 : mix_splits(hc * d);
  float* pre = partial + rows * splits * (1 + n);
  if (mixes) {
    mix_from_products_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(streams, mixes, hc * d, n, partial);
  } else {
    const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((n + kMixGroup - 1) / kMixGroup),
                    static_cast<unsigned>(splits));
    mix_partials_kernel<<<grid, kThreads, 0, stream>>>(streams, nullptr, fn, hc * d, n, partial);
  }
  STRATA_CUDA_CHECK_LAUNCH();
  hc_pre_kernel<<<static_cast<unsigned>(rows), 32, 0, stream>>>(partial, splits, base, scale, mix_out, pre, hc, d,
                                                                norm_eps, hc_eps, sinkhorn_iters);
  STRATA_CUDA_CHECK_LAUNCH();
  hc_collapse_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(streams, nullptr, pre,
                                                                                              collapsed, hc, d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void hc_post(const float* mix, const float* block_out, float* streams, int64_t rows, int64_t hc, int64_t d,
             cudaStream_t stream) {
  if (rows == 0) return;
  if (hc > 8) fail("hc_post: hc_mult ", hc, " above the CUDA backend's limit of 8");
  hc_post_kernel<<<dim3(static_cast<unsigned>(rows), blocks_for(d)), kThreads, 0, stream>>>(mix, block_out, streams,
                                                                                          hc, d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void hyper_head(const float* streams, const int32_t* rows, const float* fn, const float* base, const float* scale,
                float* y, int64_t n, int64_t hc, int64_t d, float norm_eps, float hc_eps, float* partial,
                cudaStream_t stream) {
  if (n == 0) return;
  if (hc > 8) fail("hyper_head: hc_mult ", hc, " above the CUDA backend's limit of 8");
  const int64_t splits = mix_splits(hc * d);
  float* pre = partial + n * splits * (1 + hc);
  mix_partials_kernel<<<dim3(static_cast<unsigned>(n), 1, static_cast<unsigned>(splits)), kThreads, 0, stream>>>(
      streams, rows, fn, hc * d, hc, partial);
  STRATA_CUDA_CHECK_LAUNCH();
  hyper_head_kernel<<<static_cast<unsigned>(n), 32, 0, stream>>>(partial, splits, base, scale, pre, hc, d, norm_eps,
                                                                 hc_eps);
  STRATA_CUDA_CHECK_LAUNCH();
  hc_collapse_kernel<<<dim3(static_cast<unsigned>(n), blocks_for(d)), kThreads, 0, stream>>>(streams, rows, pre, y, hc,
                                                                                           d);
  STRATA_CUDA_CHECK_LAUNCH();
}

void join_streams(const float* per_stream, const float* shared, float* out, int64_t rows, int64_t hc, int64_t d,
                  cudaStream_t stream) {
  if (rows == 0) return;
  join_streams_kernel<<<dim3(static_cast<unsigned>(rows * hc), blocks_for(d)), kThreads, 0, stream>>>(per_stream, shared,
                                                                                                   out, hc, d);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
