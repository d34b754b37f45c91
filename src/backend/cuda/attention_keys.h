#pragma once
// The keys each query attends to, and the sliding-window ring (attention_keys.cuh); the attention kernels
// themselves are in attention.cu / attention_mma.cu (ops.h). CudaBackend::sparse_attention and update_window:
// attention.cpp. Pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/step_layout.h"

namespace strata::cuda {

// Each row's key pointers for sparse_attention: its window (this step's kv rows, older ones from the ring at
// ring[c] + ring_offset, position p in row p % ring_rows), then entries (all closed ones, or the picked ones).
enum class KeyEntries { None, All, Picked };
void attention_keys(const float* kv, float* const* ring, int64_t ring_offset, int64_t ring_rows, int64_t window,
                    int64_t head_dim,
                    KeyEntries mode, const EntryTable& entries, int64_t rate, const int32_t* picks,
                    const int32_t* pick_count, int64_t topk, const StepLayout& rows, int64_t max_keys,
                    const float** keys, int32_t* key_count, cudaStream_t stream);
// The last `ring_rows` kv rows of each chunk into its ring (window + max_rollback - 1 rows: state_layout.h).
void update_window(const float* kv, float* const* ring, int64_t ring_offset, int64_t ring_rows, int64_t head_dim,
                   const StepLayout& rows, cudaStream_t stream);

}  // namespace strata::cuda
