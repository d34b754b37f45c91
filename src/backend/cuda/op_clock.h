#pragma once
// Where a CUDA forward spends its time, op by op (--cuda-op-times): CUDA events around each backend op,
// read after the step's final synchronisation (no extra syncs), and the host's own time inside the op (launches,
// uploads, waits), summed per op and reported when the model goes away. Steps of more than kDecodeRows rows count
// as prefill, the others as decode by their row count, so one bench run separates them. Off by default: then a
// scope costs a branch.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata::cuda {

class OpClock {
 public:
  static constexpr int64_t kDecodeRows = 256;
  explicit OpClock(bool on) : on_(on) {}
  ~OpClock();
  OpClock(const OpClock&) = delete;
  OpClock& operator=(const OpClock&) = delete;
  bool on() const { return on_; }

  class Scope {
   public:
    Scope(OpClock* clock, const char* op, int64_t rows, cudaStream_t stream);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpClock* clock_;
    size_t mark_ = 0;
    cudaStream_t stream_;
    std::chrono::steady_clock::time_point host_start_;
  };

  // After the stream has synchronised: the recorded ops' times go into the totals.
  void collect();
  std::string report() const;

 private:
  struct Mark {
    std::string op;
    cudaEvent_t start, stop;
    double host_ms = 0;
  };
  cudaEvent_t event();
  bool on_;
  std::vector<cudaEvent_t> pool_;
  size_t pool_used_ = 0;
  std::vector<Mark> marks_;
  struct Total {
    int64_t calls = 0;
    double gpu_ms = 0, host_ms = 0;
  };
  std::map<std::string, Total> totals_;
};

}  // namespace strata::cuda
