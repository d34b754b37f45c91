#pragma once
// Every CUDA and cuBLAS call is checked; a failure becomes a strata::Error naming the call site and the error.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace strata::cuda {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) fail("CUDA error in ", what, " (", file, ":", line, "): ", cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* what, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS error in ", what, " (", file, ":", line, "): ", cublasLtGetStatusString(s));
}

}  // namespace strata::cuda

#define STRATA_CUDA_CHECK(call) ::strata::cuda::check((call), #call, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here, execution errors at the next synchronisation.
#define STRATA_CUDA_CHECK_LAUNCH() ::strata::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
