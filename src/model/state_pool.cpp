#include "model/state_pool.h"

#include <algorithm>

#include "core/error.h"

namespace strata::model {

StatePool::StatePool(const Model& model, StatePoolLimits limits) : limits_(limits), layout_(model.state_layout()) {
  if (limits.max_sequences < 1) fail("state pool: max_sequences must be ≥ 1, got ", limits.max_sequences);
  if (limits.blocks < 0) fail("state pool: the token block count must be ≥ 0, got ", limits.blocks);
  blocks_ = model.make_block_pool(limits.blocks);
  for (int64_t i = 0; i < limits.max_sequences; ++i)
    slots_.push_back(std::make_unique<SequenceState>(model.new_sequence(blocks_.get())));
  for (int64_t i = limits.max_sequences - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

int64_t StatePool::fixed_bytes_per_sequence(const Model& model) {
  return model.fixed_state_floats() * static_cast<int64_t>(sizeof(float));
}

StatePoolLimits StatePool::limits_for_bytes(const Model& model, int64_t bytes, int64_t max_sequences) {
  StatePoolLimits l;
  l.max_sequences = max_sequences;
  const int64_t fixed = fixed_bytes_per_sequence(model) * max_sequences;
  const int64_t block_bytes = model.state_layout().block_floats * static_cast<int64_t>(sizeof(float));
  if (block_bytes == 0) {  // no compressor: nothing goes to token blocks
    if (bytes < fixed)
      fail("state memory of ", bytes, " bytes cannot hold ", max_sequences, " sequences (", fixed,
           " bytes of sliding windows)");
    l.blocks = 0;
    return l;
  }
  if (bytes < fixed + block_bytes)
    fail("state memory of ", bytes, " bytes cannot hold ", max_sequences, " sequences (", fixed,
         " bytes of sliding windows and compressor rings) plus one token block of ", block_bytes, " bytes");
  l.blocks = (bytes - fixed) / block_bytes;
  return l;
}

std::optional<int32_t> StatePool::acquire_slot() {
  if (free_.empty()) return std::nullopt;
  const int32_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void StatePool::release_slot(int32_t index) {
  slot(index).reset();
  free_.push_back(index);
}

SequenceState& StatePool::slot(int32_t index) {
  if (index < 0 || index >= static_cast<int32_t>(slots_.size()))
    fail("state pool: slot ", index, " is outside the pool's ", slots_.size(), " slots");
  return *slots_[static_cast<size_t>(index)];
}

SequenceState* StatePool::acquire() {
  const auto s = acquire_slot();
  return s ? &slot(*s) : nullptr;
}

void StatePool::release(SequenceState* state) {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].get() == state) return release_slot(static_cast<int32_t>(i));
  fail("state pool: release of a state that is not one of the pool's slots");
}

}  // namespace strata::model
