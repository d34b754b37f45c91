#pragma once
// Copies between pageable host memory and the device through two pinned buffers, so the DMA engine runs at pinned
// speed while the CPU moves the next chunk in or the last one out (double buffering). A pageable cudaMemcpy moves
// state (prefix-cache saves and restores, snapshots) at 2–6 GB/s on an H200; staged, the copy is bounded by one
// host memcpy and the link instead. Small copies go straight through: staging them costs more than it saves.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace strata::cuda {

class StagedCopier {
 public:
  explicit StagedCopier(size_t chunk_bytes = size_t{4} << 20) : chunk_(chunk_bytes) {}
  ~StagedCopier();
  StagedCopier(const StagedCopier&) = delete;
  StagedCopier& operator=(const StagedCopier&) = delete;

  // Both return once the copy is complete, on `stream` (ordered with the work queued there before).
  void to_device(void* device_dst, const void* host_src, size_t bytes, cudaStream_t stream);
  void to_host(void* host_dst, const void* device_src, size_t bytes, cudaStream_t stream);
  // Many copies of `bytes` each to the device, packed into the pinned buffers back to back, so filling one buffer
  // overlaps the other's transfers across copies (a prefix's blocks are a few hundred KB each).
  struct Copy {
    void* device_dst;
    const void* host_src;
  };
  void to_device_many(const std::vector<Copy>& copies, size_t bytes, cudaStream_t stream);

 private:
  void ensure();  // the pinned buffers and their events, on first use

  size_t chunk_;
  void* pinned_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
};

}  // namespace strata::cuda
