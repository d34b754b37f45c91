#include "backend/cuda/op_clock.h"

#include <algorithm>
#include <cstdio>

#include "backend/cuda/cuda_check.h"

namespace strata::cuda {

OpClock::~OpClock() {
  if (on_ && !totals_.empty()) std::fprintf(stderr, "%s", report().c_str());
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

cudaEvent_t OpClock::event() {
  if (pool_used_ == pool_.size()) {
    cudaEvent_t e;
    STRATA_CUDA_CHECK(cudaEventCreate(&e));
    pool_.push_back(e);
  }
  return pool_[pool_used_++];
}

OpClock::Scope::Scope(OpClock* clock, const char* op, int64_t rows, cudaStream_t stream)
    : clock_(clock && clock->on_ ? clock : nullptr), stream_(stream) {
  if (!clock_) return;
  mark_ = clock_->marks_.size();
  const std::string kind = rows > kDecodeRows ? "prefill" : "decode " + std::to_string(rows) + " rows";
  clock_->marks_.push_back({kind + ": " + op, clock_->event(), nullptr});
  STRATA_CUDA_CHECK(cudaEventRecord(clock_->marks_[mark_].start, stream_));
  host_start_ = std::chrono::steady_clock::now();
}

OpClock::Scope::~Scope() {
  if (!clock_) return;
  clock_->marks_[mark_].host_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_start_).count();
  clock_->marks_[mark_].stop = clock_->event();
  cudaEventRecord(clock_->marks_[mark_].stop, stream_);  // no throw from a destructor; collect() checks
}

void OpClock::collect() {
  if (!on_) return;
  for (const Mark& m : marks_) {
    float ms = 0.0f;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, m.start, m.stop));
    Total& t = totals_[m.op];
    t.calls += 1;
    t.gpu_ms += ms;
    t.host_ms += m.host_ms;
  }
  marks_.clear();
  pool_used_ = 0;
}

std::string OpClock::report() const {
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  // Grouped by kind (the text before ':'), slowest op first within a kind.
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    const std::string ka = a.first.substr(0, a.first.find(':')), kb = b.first.substr(0, b.first.find(':'));
    return ka != kb ? ka < kb : a.second.gpu_ms > b.second.gpu_ms;
  });
  std::string out =
      "CUDA op times (--cuda-op-times): GPU time between the op's events, and the host's time inside the op\n";
  char line[200];
  for (const auto& [op, t] : rows) {
    std::snprintf(line, sizeof line, "  %-36s %8lld calls  GPU %11.3f ms %9.1f us/call  host %9.3f ms\n", op.c_str(),
                  static_cast<long long>(t.calls), t.gpu_ms, 1000.0 * t.gpu_ms / static_cast<double>(t.calls),
                  t.host_ms);
    out += line;
  }
  return out;
}

}  // namespace strata::cuda
