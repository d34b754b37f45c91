#pragma once
// What the files defining CudaBackend's ops share (cuda_backend.cpp, linear.cpp, norm_rope.cpp, mhc.cpp,
// compressor.cpp, indexer.cpp, attention.cpp, moe.cpp): the op timer and uploads into the step's scratch.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

// Times the enclosing op when --cuda-op-times is given (op_clock.h).
#define STRATA_TIMED_OP(name) const OpClock::Scope timed_op_(clock_, name, rows_.rows, stream_)

namespace strata::cuda {

template <typename T>
T* CudaBackend::upload(const std::vector<T>& host) {
  T* d = scratch_.alloc<T>(std::max<int64_t>(1, static_cast<int64_t>(host.size())));
  if (!host.empty())
    STRATA_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream_));
  return d;
}

}  // namespace strata::cuda
