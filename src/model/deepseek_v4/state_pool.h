#pragma once
// Bounded per-sequence V4 state for serving: a fixed number of sequence slots (each with its sliding window and
// compressor buffers, built once) and a fixed number of compressed-entry pages, all allocated at start-up.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/state.h"

namespace strata::model::v4 {

struct StatePoolLimits {
  int64_t max_sequences = 64;
  int64_t entry_pages = 4096;
  int64_t page_floats = EntryPageArena::kDefaultPageFloats;
};

class StatePool {
 public:
  StatePool(const Model& model, StatePoolLimits limits);

  // Limits that fit `bytes`: the slots' fixed state first, the rest as entry pages. Errors if even the slots
  // do not fit.
  static StatePoolLimits limits_for_bytes(const Model& model, int64_t bytes, int64_t max_sequences);
  static int64_t fixed_bytes_per_sequence(const Model& model);

  // Slots are named by index, so a step plan can say which state a sequence uses without pointing into the pool.
  std::optional<int32_t> acquire_slot();  // a reset state's slot, or nullopt when every slot is taken
  void release_slot(int32_t slot);        // its pages go back to the arena
  SequenceState& slot(int32_t slot);      // the state in a slot (an error for an index out of range)
  SequenceState* acquire();               // acquire_slot's state, or nullptr
  void release(SequenceState* state);

  // Pages a sequence of `tokens` tokens holds in total (from empty).
  int64_t pages_for_tokens(int64_t tokens) const;
  // Pages `state` must still obtain to consume `tokens` more tokens.
  int64_t pages_needed(const SequenceState& state, int64_t tokens) const;
  // Takes those pages now, all or nothing, so the forward step cannot run out mid-way.
  bool reserve(SequenceState& state, int64_t tokens);

  int64_t free_slots() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_slots() const { return limits_.max_sequences - free_slots(); }
  int64_t free_pages() const { return arena_->free_pages(); }
  int64_t used_pages() const { return arena_->used_pages(); }
  const StatePoolLimits& limits() const { return limits_; }

 private:
  StatePoolLimits limits_;
  std::unique_ptr<EntryPageArena> arena_;  // on the model's device
  std::vector<std::unique_ptr<SequenceState>> slots_;
  std::vector<int32_t> free_;
};

}  // namespace strata::model::v4
