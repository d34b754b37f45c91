#pragma once
// Owning device allocation (cudaMalloc; never managed memory) with typed copies to and from the host.
#include <cstddef>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count) STRATA_CUDA_CHECK(cudaMalloc(&ptr_, count * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }

  void upload(const std::vector<T>& host) {
    if (host.size() != count_) fail("DeviceBuffer::upload: ", host.size(), " elements into a buffer of ", count_);
    STRATA_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    STRATA_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fills every byte with `byte` (tests poison outputs to catch unwritten elements).
  void fill_bytes(int byte) { STRATA_CUDA_CHECK(cudaMemset(ptr_, byte, count_ * sizeof(T))); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace strata::cuda
