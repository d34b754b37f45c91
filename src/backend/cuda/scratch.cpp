#include "backend/cuda/scratch.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

Scratch::~Scratch() {
  for (Block& b : blocks_) cudaFree(b.data);
}

void* Scratch::bytes(size_t n) {
  n = (n + 255) / 256 * 256;  // keep every tensor 256-byte aligned (cuBLASLt, vector loads)
  while (current_ < blocks_.size() && blocks_[current_].used + n > blocks_[current_].size) ++current_;
  if (current_ == blocks_.size()) {
    Block b;
    b.size = std::max<size_t>(n, blocks_.empty() ? size_t{256} << 20 : blocks_.back().size * 2);
    STRATA_CUDA_CHECK(cudaMalloc(&b.data, b.size));
    blocks_.push_back(b);
  }
  Block& b = blocks_[current_];
  void* p = b.data + b.used;
  b.used += n;
  return p;
}

Scratch::Mark Scratch::mark() const {
  if (current_ == blocks_.size()) return {current_, 0};
  return {current_, blocks_[current_].used};
}

void Scratch::release(const Mark& m) {
  for (size_t b = m.block + 1; b < blocks_.size(); ++b) blocks_[b].used = 0;
  if (m.block < blocks_.size()) blocks_[m.block].used = m.used;
  current_ = m.block;
}

void Scratch::reset() {
  for (Block& b : blocks_) b.used = 0;
  current_ = 0;
}

}  // namespace strata::cuda
