#pragma once
// The Lightning Indexer on the device (indexer.cuh): scores over the closed entries, then each row's top-k.
// CudaBackend::indexer_topk is in indexer.cpp. Pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/step_layout.h"

namespace strata::cuda {

// Lightning Indexer: scores of every visible entry, then the top-k (score desc, index asc) per row.
// picks [rows, topk], pick_count [rows]. `scratch` holds rows · max_visible floats.
void indexer_topk(const float* q, const float* head_w, const EntryTable& entries, const StepLayout& rows,
                  int64_t rate, int64_t heads, int64_t head_dim, int64_t topk, int64_t max_visible, float* scratch,
                  int32_t* picks, int32_t* pick_count, cudaStream_t stream);
// The selection alone (indexer_topk's second step, and what ops_check times): the top-k of each row's visible
// scores, already in `scores` [rows, max_visible]. topk < 4096.
void indexer_select(const float* scores, const StepLayout& rows, int64_t rate, int64_t max_visible, int64_t topk,
                    int32_t* picks, int32_t* pick_count, cudaStream_t stream);

}  // namespace strata::cuda
