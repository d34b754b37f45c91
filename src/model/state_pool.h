#pragma once
// Bounded per-sequence state for serving: a fixed number of sequence slots (each with its fixed block of rings,
// built once) and a fixed number of token blocks (state_layout.h), all allocated at start-up.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/model.h"
#include "model/sequence_state.h"

namespace strata::model {

struct StatePoolLimits {
  int64_t max_sequences = 64;
  int64_t blocks = 256;  // token blocks of compressed entries, shared by all slots
};

class StatePool {
 public:
  StatePool(const Model& model, StatePoolLimits limits);

  // Limits that fit `bytes`: the slots' fixed blocks first, the rest as token blocks. Errors if even the slots do
  // not fit.
  static StatePoolLimits limits_for_bytes(const Model& model, int64_t bytes, int64_t max_sequences);
  static int64_t fixed_bytes_per_sequence(const Model& model);

  // Slots are named by index, so a step plan can say which state a sequence uses without pointing into the pool.
  std::optional<int32_t> acquire_slot();  // a reset state's slot, or nullopt when every slot is taken
  void release_slot(int32_t slot);        // its block references go back to the pool
  SequenceState& slot(int32_t slot);      // the state in a slot (an error for an index out of range)
  SequenceState* acquire();               // acquire_slot's state, or nullptr
  void release(SequenceState* state);

  // Token blocks a sequence of `tokens` tokens holds in total (from empty).
  int64_t blocks_for_tokens(int64_t tokens) const { return layout_.blocks_for_tokens(tokens); }
  // Takes the blocks `state` needs to consume `tokens` more tokens now, all or nothing, so the forward step cannot
  // run out mid-way.
  bool reserve(SequenceState& state, int64_t tokens) { return state.ensure_blocks(tokens); }

  int64_t free_slots() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_slots() const { return limits_.max_sequences - free_slots(); }
  int64_t free_blocks() const { return blocks_->free_blocks(); }
  int64_t used_blocks() const { return blocks_->used_blocks(); }
  const StatePoolLimits& limits() const { return limits_; }
  BlockPool& blocks() { return *blocks_; }
  const BlockPool& blocks() const { return *blocks_; }

 private:
  StatePoolLimits limits_;
  const StateLayout& layout_;
  std::unique_ptr<BlockPool> blocks_;  // on the model's device
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<int32_t> free_;
};

}  // namespace strata::model
