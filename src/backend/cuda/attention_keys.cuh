#pragma once
// Kernels of attention_keys.h: each row's key pointers, and the window ring's update.
// Compiled once, through v4_kernels.cu (one nvcc translation unit for every V4 kernel: see there).
#include "backend/cuda/attention_keys.h"
#include "backend/cuda/v4_device.cuh"

namespace strata::cuda {

namespace {

__global__ void attention_keys_kernel(const float* kv, float* const* ring, int64_t ring_offset, int64_t ring_rows,
                                      int64_t window, int64_t hd, KeyEntries mode, EntryTable t, int64_t rate, const int32_t* picks,
                                      const int32_t* pick_count, int64_t topk, StepLayout L, int64_t max_keys,
                                      const float** keys, int32_t* key_count) {
  const int64_t r = blockIdx.x, chunk = L.chunk[r], pos = L.position[r];
  const int64_t pos0 = L.pos0[chunk], first = L.first[chunk];
  const int64_t lowest = L.window_floor[chunk];  // a bounded replay's rings hold nothing below it
  const int64_t lo = pos - window + 1 > lowest ? pos - window + 1 : lowest;
  const int64_t n_window = pos - lo + 1;
  const float** out = keys + r * max_keys;
  for (int64_t i = threadIdx.x; i < n_window; i += blockDim.x) {
    const int64_t j = lo + i;
    out[i] = j >= pos0 ? kv + (first + j - pos0) * hd : ring[chunk] + ring_offset + (j % ring_rows) * hd;
  }
  int64_t n_entries = 0;
  if (mode == KeyEntries::Picked) {
    n_entries = pick_count[r];
    for (int64_t i = threadIdx.x; i < n_entries; i += blockDim.x)
      out[n_window + i] = entry_address(t, chunk, picks[r * topk + i]);
  } else if (mode == KeyEntries::All) {
    const int64_t closed = (pos0 + L.count[chunk]) / rate;
    n_entries = min((pos + 1) / rate, closed);
    for (int64_t i = threadIdx.x; i < n_entries; i += blockDim.x) out[n_window + i] = entry_address(t, chunk, i);
  }
  if (threadIdx.x == 0) key_count[r] = static_cast<int32_t>(n_window + n_entries);
}

__global__ void update_window_kernel(const float* kv, float* const* ring, int64_t ring_offset, int64_t ring_rows,
                                     int64_t hd, StepLayout L) {
  const int64_t r = blockIdx.x, chunk = L.chunk[r];
  if (r - L.first[chunk] < L.count[chunk] - ring_rows) return;
  float* dst = ring[chunk] + ring_offset + (L.position[r] % ring_rows) * hd;
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) dst[c] = kv[r * hd + c];
}

}  // namespace

void attention_keys(const float* kv, float* const* ring, int64_t ring_offset, int64_t ring_rows, int64_t window,
                    int64_t head_dim,
                    KeyEntries mode, const EntryTable& entries, int64_t rate, const int32_t* picks,
                    const int32_t* pick_count, int64_t topk, const StepLayout& rows, int64_t max_keys,
                    const float** keys, int32_t* key_count, cudaStream_t stream) {
  if (rows.rows == 0) return;
  attention_keys_kernel<<<static_cast<unsigned>(rows.rows), kThreads, 0, stream>>>(
      kv, ring, ring_offset, ring_rows, window, head_dim, mode, entries, rate, picks, pick_count, topk, rows, max_keys, keys,
      key_count);
  STRATA_CUDA_CHECK_LAUNCH();
}

void update_window(const float* kv, float* const* ring, int64_t ring_offset, int64_t ring_rows, int64_t head_dim,
                   const StepLayout& rows, cudaStream_t stream) {
  if (rows.rows == 0) return;
  update_window_kernel<<<static_cast<unsigned>(rows.rows), kThreads, 0, stream>>>(kv, ring, ring_offset, ring_rows,
                                                                                  head_dim, rows);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
