#pragma once
// DeepSeek-V4's state layout (model/state_layout.h) from its weights: a window ring per layer, and a ring and an
// entry stream for each compressor (CSA's, HCA's, the Lightning Indexer's).
#include <cstdint>

#include "model/config.h"
#include "model/deepseek_v4/weights.h"
#include "model/state_layout.h"

namespace strata::model::v4 {

// The layout of `weights`' compressors. `max_rollback` ≥ 1: a speculative step that keeps k of n tokens drops n - k.
StateLayout make_state_layout(const ModelConfig& cfg, const ModelWeights& weights, int64_t max_rollback);

// MTP layer `mtp_layer` of `layout` seen as a model of one sliding-window layer (layer 0), the same fixed block:
// the MTP forward runs the ordinary layer ops on a state with this layout (forward.h, Forward::draft).
StateLayout mtp_view_layout(const StateLayout& layout, int64_t mtp_layer);

}  // namespace strata::model::v4
