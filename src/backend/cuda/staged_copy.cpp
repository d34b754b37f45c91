#include "backend/cuda/staged_copy.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

namespace {

constexpr size_t kDirectBelow = 64 << 10;  // a copy this small goes straight through

}  // namespace

StagedCopier::~StagedCopier() {
  for (int i = 0; i < 2; ++i) {
    if (done_[i]) cudaEventDestroy(done_[i]);
    if (pinned_[i]) cudaFreeHost(pinned_[i]);
  }
}

void StagedCopier::ensure() {
  if (pinned_[0]) return;
  for (int i = 0; i < 2; ++i) {
    STRATA_CUDA_CHECK(cudaMallocHost(&pinned_[i], chunk_));
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
  }
}

void StagedCopier::to_device(void* device_dst, const void* host_src, size_t bytes, cudaStream_t stream) {
  if (bytes < kDirectBelow) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  ensure();
  const auto* src = static_cast<const char*>(host_src);
  auto* dst = static_cast<char*>(device_dst);
  bool busy[2] = {false, false};
  for (size_t at = 0, i = 0; at < bytes; at += chunk_, i ^= 1) {
    const size_t n = std::min(chunk_, bytes - at);
    if (busy[i]) STRATA_CUDA_CHECK(cudaEventSynchronize(done_[i]));  // its previous chunk has left the buffer
    std::memcpy(pinned_[i], src + at, n);  // while the other buffer's chunk is on its way
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst + at, pinned_[i], n, cudaMemcpyHostToDevice, stream));
    STRATA_CUDA_CHECK(cudaEventRecord(done_[i], stream));
    busy[i] = true;
  }
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void StagedCopier::to_device_many(const std::vector<Copy>& copies, size_t bytes, cudaStream_t stream) {
  if (copies.empty()) return;
  if (bytes > chunk_ || bytes < kDirectBelow) {  // one at a time
    for (const Copy& c : copies) to_device(c.device_dst, c.host_src, bytes, stream);
    return;
  }
  ensure();
  const size_t per_buffer = chunk_ / bytes;
  bool busy[2] = {false, false};
  for (size_t first = 0, i = 0; first < copies.size(); first += per_buffer, i ^= 1) {
    if (busy[i]) STRATA_CUDA_CHECK(cudaEventSynchronize(done_[i]));
    auto* buffer = static_cast<char*>(pinned_[i]);
    const size_t last = std::min(copies.size(), first + per_buffer);
    for (size_t c = first; c < last; ++c) std::memcpy(buffer + (c - first) * bytes, copies[c].host_src, bytes);
    for (size_t c = first; c < last; ++c)
      STRATA_CUDA_CHECK(cudaMemcpyAsync(copies[c].device_dst, buffer + (c - first) * bytes, bytes,
                                        cudaMemcpyHostToDevice, stream));
    STRATA_CUDA_CHECK(cudaEventRecord(done_[i], stream));
    busy[i] = true;
  }
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void StagedCopier::to_host(void* host_dst, const void* device_src, size_t bytes, cudaStream_t stream) {
  if (bytes < kDirectBelow) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  ensure();
  const auto* src = static_cast<const char*>(device_src);
  auto* dst = static_cast<char*>(host_dst);
  auto start = [&](size_t at, int i) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(pinned_[i], src + at, std::min(chunk_, bytes - at), cudaMemcpyDeviceToHost, stream));
    STRATA_CUDA_CHECK(cudaEventRecord(done_[i], stream));
  };
  start(0, 0);
  for (size_t at = 0, i = 0; at < bytes; at += chunk_, i ^= 1) {
    // The next chunk comes into the other buffer while this one is copied out.
    if (at + chunk_ < bytes) start(at + chunk_, static_cast<int>(i ^ 1));
    STRATA_CUDA_CHECK(cudaEventSynchronize(done_[i]));
    std::memcpy(dst + at, pinned_[i], std::min(chunk_, bytes - at));
  }
}

}  // namespace strata::cuda
