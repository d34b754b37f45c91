#pragma once
// The experts' element kernels (moe_experts.cuh): the per-expert path's row gather and SwiGLU, and the combine
// of the routed outputs every path ends with. The grouped paths are moe.h, moe_gemm.h, moe_mma.h;
// CudaBackend::experts is in moe.cpp. Pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace strata::cuda {

// y[i] = x[index[i]] as `type`, rows of d, for i < n.
void gather_rows(const float* x, const int32_t* index, void* y, int64_t n, int64_t d, GemmType type,
                 cudaStream_t stream);
// h = silu(min(gate, L)) · clamp(up, −L, L) as `type`, for [n, inter].
void swiglu(const float* gate, const float* up, void* h, int64_t n, float limit, GemmType type, cudaStream_t stream);
// out[r] = base[r] + Σ_j weight[r, j] · routed[slot[r, j]] over j < k (base may be null).
void moe_combine(const float* base, const float* routed, const int32_t* slot, const float* weight, float* out,
                 int64_t rows, int64_t k, int64_t d, cudaStream_t stream);

}  // namespace strata::cuda
