#pragma once
// The MoE router on the device (router.cuh). CudaBackend::route is in moe.cpp. Pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// Router: logits [rows, experts] (scores written to `scores`) → per row k expert ids and weights (score function, hash or biased
// top-k selection, normalisation, routed scaling).
void route(const float* logits, const float* bias, const int32_t* tid2eid, const int32_t* tokens, int64_t rows,
           int64_t experts, int64_t k, int scoring_func, float routed_scaling, float* scores, int32_t* ids,
           float* weights, cudaStream_t stream);

}  // namespace strata::cuda
