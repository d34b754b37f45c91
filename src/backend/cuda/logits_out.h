#pragma once
// The end of a step on the GPU: what of the logits goes home. Greedy rows need only their argmax (4 bytes instead
// of a vocabulary row of 0.5 MB), and rows that do go home whole pass through pinned memory, which the copy engine
// reaches at the link's speed; pageable memory is staged by the driver at a fraction of it (35 ms of GPU time per
// step for 256 rows on the H200 before).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace strata::cuda {

// out[i] = the column of the first maximum of row rows[i] of x [*, cols] (ties to the lowest column, as the CPU
// sampler's std::max_element).
void argmax_rows(const float* x, int64_t cols, const int32_t* rows, int64_t count, int32_t* out, cudaStream_t stream);

// out[i] = 1 / Σ exp(x − max) over row rows[i] (in double; 0 for a row without a finite maximum): the probability
// of its most likely token at temperature 1, as cpu::top_probability.
void top_probability_rows(const float* x, int64_t cols, const int32_t* rows, int64_t count, float* out,
                          cudaStream_t stream);

// Pinned host memory that grows to the largest request and is kept between steps.
class HostStaging {
 public:
  HostStaging() = default;
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  void* bytes(size_t n);

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace strata::cuda
