#pragma once
// What one sequence carries between forward calls (DESIGN.md "Per-sequence state"). Everything here is a pure
// function of the token prefix, so prefill in any chunking followed by decode reproduces one full forward.
#include <cstdint>
#include <vector>

namespace strata::model::v4 {

// One gated-pooling compressor's progress through the sequence.
struct CompressorState {
  int64_t rate = 0, width = 0, dim = 0;  // width = projected channels per token (2·dim with overlap)
  // Tokens of the window still open (< rate of them): raw kv and gate projections, [rate, width] each.
  std::vector<float> pending_kv, pending_gate;
  int64_t n_pending = 0;
  // CSA overlap: the last closed window's first-half slice (kv, gate + position bias), [rate, dim] each; it takes
  // part in the next window's entry.
  std::vector<float> overlap_kv, overlap_gate;
  bool has_overlap = false;
  // Append-only compressed entries, [n_entries, dim]; entry n pools tokens [n·rate, (n+1)·rate).
  std::vector<float> entries;
  int64_t n_entries = 0;

  const float* entry(int64_t n) const { return entries.data() + n * dim; }
};

struct LayerState {
  // Sliding window of shared K=V vectors: position p lives in slot p % window.
  std::vector<float> swa;
  CompressorState compressor;  // CSA/HCA layers
  CompressorState indexer;     // CSA layers: the Lightning Indexer's own compressor
};

struct SequenceState {
  int64_t num_tokens = 0;  // positions consumed so far; the next token gets this position
  std::vector<LayerState> layers;
};

}  // namespace strata::model::v4
