// device_copies.h: one block row per copy, the runs passed by value in the launch's parameters (no upload, so
// nothing to keep alive until the copies are done). Compiled through v4_kernels.cu.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_copies.h"

namespace strata::cuda {

namespace {

constexpr int kRunsPerLaunch = 128;  // 128 × 24 bytes of parameters, well inside the 4 KiB every GPU takes

struct DeviceRuns {
  DeviceCopy run[kRunsPerLaunch];
  int count;
};

__global__ void copy_runs_kernel(DeviceRuns runs) {
  const DeviceCopy c = runs.run[blockIdx.y];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Four floats a load where both ends allow it (runs are usually whole rows of 16-byte-aligned blocks).
  const bool vector = (reinterpret_cast<uintptr_t>(c.dst) % 16 == 0) && (reinterpret_cast<uintptr_t>(c.src) % 16 == 0);
  const int64_t quads = vector ? c.n / 4 : 0;
  for (int64_t i = first; i < quads; i += stride)
    reinterpret_cast<float4*>(c.dst)[i] = reinterpret_cast<const float4*>(c.src)[i];
  for (int64_t i = quads * 4 + first; i < c.n; i += stride) c.dst[i] = c.src[i];
}

}  // namespace

void copy_device_runs(const std::vector<DeviceCopy>& copies, cudaStream_t stream) {
  DeviceRuns runs{};
  int64_t longest = 0;
  const auto launch = [&] {
    if (runs.count == 0) return;
    constexpr int kThreads = 256;
    // Enough blocks along x for the longest run's float4s, capped: a block strides over the rest.
    const int64_t blocks = std::min<int64_t>(1024, (longest / 4 + kThreads - 1) / kThreads + 1);
    copy_runs_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(runs.count)), kThreads, 0, stream>>>(
        runs);
    STRATA_CUDA_CHECK_LAUNCH();
    runs.count = 0;
    longest = 0;
  };
  for (const DeviceCopy& c : copies) {
    if (c.n <= 0) continue;
    runs.run[runs.count++] = c;
    longest = std::max(longest, c.n);
    if (runs.count == kRunsPerLaunch) launch();
  }
  launch();
}

}  // namespace strata::cuda
