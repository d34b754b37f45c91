#pragma once
// One forward step over several sequences, as every backend sees it: which rows belong to which sequence, at which
// positions, and each sequence's state.
#include <cstdint>
#include <vector>

#include "model/model.h"
#include "model/sequence_state.h"

namespace strata::model::v4 {

// The family's state types (model/sequence_state.h, model/model.h), as the V4 forward and its backends name them.
using model::BlockPool;
using model::CompressorLayout;
using model::LayerLayout;
using model::LayerObserver;
using model::SequenceChunk;
using model::SequenceState;
using model::StateLayout;

// Which of a layer's two compressors an op works on.
enum class CompressorSlot { Attention, Indexer };

// The keys of each query: its sliding window, plus on HCA layers
// every compressed entry whose window has closed, plus on CSA layers the indexer's top-k entries.
enum class AttentionKeys { Window, WindowAndAllEntries, WindowAndPicked };

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
  // Step rows whose last-layer streams the step keeps (LogitsStage::stream_rows): part of a step's shape, since a
  // recorded step (CUDA graphs) must keep them as the body does.
  std::vector<int64_t> stream_rows = {};
  // A step whose first tensor comes from the host (an MTP draft's hidden streams, [rows·hc, hidden]): a backend
  // uploads it with the rows, and from_host of this very Mat returns that upload (so the body can be recorded).
  const Mat* input = nullptr;
  SequenceState& state(int64_t chunk) const { return *(*chunks)[static_cast<size_t>(chunk)].state; }
};

}  // namespace strata::model::v4
