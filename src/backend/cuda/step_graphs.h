#pragma once
// Steps as CUDA graphs. A decode step (every sequence adds one token), a decode step verifying drafts (a sequence
// adds its token and up to a few drafts, every row a logits row) and an MTP draft step are a few hundred small
// kernels whose arguments depend only on the step's shape: the number of rows, chunks and logits rows, how many rows
// keep their last-layer streams (LogitsStage::stream_rows: the recording gathers them from a row list begin_step
// uploads), the size of a host input (an MTP draft's streams, uploaded with the rows), and bounds that
// CudaBackend::begin_step rounds up (most entries any sequence has, page-table width, windows that may close) so
// that they change every few hundred tokens, not every step. Everything that does change per step (positions,
// tokens, which chunk has how many rows, page lists, which windows close, the host input) is uploaded by begin_step
// into the same scratch addresses before the body runs. So a step whose shape was seen before replays the kernels
// recorded for it: one launch instead of hundreds, no gaps between them on the GPU. Steps with a longer chunk
// (prefill) run eagerly: their shapes rarely repeat.
//
// A shape is run eagerly the first time (it grows the scratch arena and cuBLASLt's plan cache, and tells whether
// every op it takes can be recorded), captured the second time, and replayed from then on.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <vector>

#include "backend/cuda/scratch.h"

namespace strata::cuda {

class StepGraphs {
 public:
  // Disabled (--cuda-graphs off, for comparisons), every step runs eagerly.
  explicit StepGraphs(bool enabled);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  bool enabled() const { return enabled_; }

  struct Entry {
    int64_t runs = 0;         // eager runs and captures so far
    bool recordable = true;   // every op of the step can be captured (no host round trip inside the body)
    cudaGraphExec_t exec = nullptr;
    Scratch::Mark after;      // the scratch in use when the body ended: the logits and what the step keeps
    float* logits = nullptr;  // the body's result, at a fixed address
    int64_t logits_rows = 0, logits_cols = 0;
    float* kept = nullptr;    // the body's kept stream rows (keep_rows), at a fixed address; null: none
    int64_t kept_rows = 0, kept_cols = 0;
    std::vector<int64_t> routed;  // CudaBackend's per-layer expert bookkeeping of the body
  };
  // The entry of a step shape (made on first sight). Shapes beyond kMaxEntries drop every recording first: a
  // serving process sees a bounded set of batch sizes, and a runaway set should cost memory only once.
  Entry& entry(const std::vector<int64_t>& shape);
  int64_t replays() const { return replays_; }
  void count_replay() { ++replays_; }

  static constexpr size_t kMaxEntries = 512;
  // The longest chunk of a recorded step: a token and up to 8 drafts (--speculative-tokens), or a draft's catch-up.
  static constexpr int64_t kMaxChunkRows = 16;

 private:
  void clear();
  std::map<std::vector<int64_t>, Entry> entries_;
  bool enabled_ = true;
  int64_t replays_ = 0;
};

}  // namespace strata::cuda
