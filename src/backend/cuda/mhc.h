#pragma once
// Manifold-constrained hyper-connections (mHC, paper §2.2) on the device (mhc.cuh): the block's pre mix and
// collapse, the stream update after it, the HyperHead. CudaBackend's hc_pre / hc_post / hyper_head: mhc.cpp.
// Pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// Floats of scratch hc_pre / hyper_head need for `rows` rows of `n` mixes over streams of `width` (per-slice sums).
int64_t mix_partial_floats(int64_t rows, int64_t n, int64_t width);
// mHC pre: from streams [rows, hc·d]: mix = fn · rmsnorm(streams), pre/post/comb (Sinkhorn), collapsed = Σ pre·stream.
// mix_out: [rows, hc + hc·hc] (post, then comb row-major). `partial`: mix_partial_floats(rows, (2 + hc)·hc, hc·d).
// `mixes` (optional): the products fn · streams [rows, (2 + hc)·hc] made by the caller (an fp32 GEMM, for many
// rows: the slice kernel's block reductions cost 2.5 ms at 4,096 rows); only the rows' Σx² are then taken here.
void hc_pre(const float* streams, const float* fn, const float* base, const float* scale, float* collapsed,
            float* mix_out, int64_t rows, int64_t hc, int64_t d, float norm_eps, float hc_eps, int64_t sinkhorn_iters,
            float* partial, cudaStream_t stream, const float* mixes = nullptr);
// streams[k] ← post[k] · block_out + Σ_j comb[j][k] · streams[j]  (in place).
void hc_post(const float* mix, const float* block_out, float* streams, int64_t rows, int64_t hc, int64_t d,
             cudaStream_t stream);
// The HyperHead's collapse of the streams of rows[i] into y[i].
// `partial`: mix_partial_floats(n, hc, hc·d).
void hyper_head(const float* streams, const int32_t* rows, const float* fn, const float* base, const float* scale,
                float* y, int64_t n, int64_t hc, int64_t d, float norm_eps, float hc_eps, float* partial,
                cudaStream_t stream);
// The MTP layer's input streams (docs/mtp.md): out[r, k·d + j] = per_stream[r·hc + k, j] + shared[r, j] for `rows`
// rows (per_stream [rows·hc, d], shared [rows, d], out [rows, hc·d]).
void join_streams(const float* per_stream, const float* shared, float* out, int64_t rows, int64_t hc, int64_t d,
                  cudaStream_t stream);

}  // namespace strata::cuda
