#pragma once
// One forward step over several sequences, as every backend sees it: which rows belong to which sequence, at which
// positions, and each sequence's state.
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/state.h"

namespace strata::model::v4 {

// Which of a layer's two compressors an op works on.
enum class CompressorSlot { Attention, Indexer };

// The keys of each query: its sliding window, plus on HCA layers
// every compressed entry whose window has closed, plus on CSA layers the indexer's top-k entries.
enum class AttentionKeys { Window, WindowAndAllEntries, WindowAndPicked };

// One sequence's part of a forward step: its next tokens (positions state->num_tokens onwards) and its state. What
// happens to its logits rows afterwards is the step's sampling stage (model/logits_stage.h), not the chunk's.
struct SequenceChunk {
  std::vector<int32_t> tokens;
  SequenceState* state = nullptr;
  bool all_logits = false;  // logits for every token, or only the last
};

// Rows of a step: the chunks' tokens one after another.
struct StepRows {
  std::vector<int32_t> tokens;    // every row's token id
  std::vector<int64_t> position;  // absolute position of each row
  std::vector<int64_t> sequence;  // index into the chunks of each row
  std::vector<int64_t> first;     // first row of each chunk
  std::vector<int64_t> pos0;      // position of each chunk's first row
  std::vector<int64_t> count;     // rows of each chunk
  std::vector<int64_t> logits_rows;  // the rows whose logits the step computes: each chunk's last, or all its rows

  int64_t rows() const { return static_cast<int64_t>(tokens.size()); }
  int64_t chunks() const { return static_cast<int64_t>(first.size()); }
};

struct Step {
  StepRows rows;
  std::vector<SequenceChunk>* chunks = nullptr;
  SequenceState& state(int64_t chunk) const { return *(*chunks)[static_cast<size_t>(chunk)].state; }
};

}  // namespace strata::model::v4
