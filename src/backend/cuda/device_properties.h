#pragma once
// Properties of the current device that kernels size their grids by, read once per process.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

inline int multiprocessors() {
  static const int count = [] {
    int device = 0, sms = 0;
    STRATA_CUDA_CHECK(cudaGetDevice(&device));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

}  // namespace strata::cuda
