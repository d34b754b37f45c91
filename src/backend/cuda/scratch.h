#pragma once
// The CUDA backend's device memory for one step's temporaries.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::cuda {

// Bump allocation of device memory for one step's temporaries; reset() at the start of the next step keeps the
// blocks. A block too small for a request is followed by a new, larger one.
class Scratch {
 public:
  Scratch() = default;
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* bytes(size_t n);
  // Everything allocated after mark() is freed by release(mark) (a stack inside the step).
  struct Mark {
    size_t block = 0, used = 0;
  };
  Mark mark() const;
  void release(const Mark& m);
  template <typename T>
  T* alloc(int64_t count) {
    return static_cast<T*>(bytes(static_cast<size_t>(count) * sizeof(T)));
  }
  void reset();

 private:
  struct Block {
    char* data = nullptr;
    size_t size = 0, used = 0;
  };
  std::vector<Block> blocks_;
  size_t current_ = 0;
};

}  // namespace strata::cuda
