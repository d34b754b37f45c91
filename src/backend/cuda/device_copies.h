#pragma once
// Many device-to-device copies of floats in one launch, ordered on a stream: a state snapshot layer's runs into or
// out of a shared region, a forked or copied state's token blocks. Each cudaMemcpy of the legacy stream costs a
// driver call and a turn of the copy engine (about 10 µs); a layer of a snapshot has a few dozen runs.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace strata::cuda {

struct DeviceCopy {
  float* dst;
  const float* src;
  int64_t n;
};

// dst[0, n) = src[0, n) for each copy, on `stream` (queued: returns before the copies are done). Copies must not
// overlap one another.
void copy_device_runs(const std::vector<DeviceCopy>& copies, cudaStream_t stream);

}  // namespace strata::cuda
