#include "model/deepseek_v4/state_pool.h"

#include <algorithm>

#include "core/error.h"

namespace strata::model::v4 {

StatePool::StatePool(const Model& model, StatePoolLimits limits)
    : limits_(limits) {
  if (limits.max_sequences < 1) fail("state pool: max_sequences must be ≥ 1, got ", limits.max_sequences);
  arena_ = model.make_arena(limits.page_floats, limits.entry_pages);
  for (int64_t i = 0; i < limits.max_sequences; ++i)
    slots_.push_back(std::make_unique<SequenceState>(model.new_sequence(arena_.get())));
  for (int64_t i = limits.max_sequences - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

int64_t StatePool::fixed_bytes_per_sequence(const Model& model) {
  return model.fixed_state_floats() * static_cast<int64_t>(sizeof(float));
}

StatePoolLimits StatePool::limits_for_bytes(const Model& model, int64_t bytes, int64_t max_sequences) {
  StatePoolLimits l;
  l.max_sequences = max_sequences;
  const int64_t fixed = fixed_bytes_per_sequence(model) * max_sequences;
  const int64_t page_bytes = l.page_floats * static_cast<int64_t>(sizeof(float));
  if (bytes < fixed + page_bytes)
    fail("state memory of ", bytes, " bytes cannot hold ", max_sequences, " sequences (", fixed,
         " bytes of sliding windows and buffers) plus one entry page");
  l.entry_pages = (bytes - fixed) / page_bytes;
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

int64_t StatePool::pages_for_tokens(int64_t tokens) const {
  int64_t pages = 0;
  for (const LayerState& l : slots_.front()->layers)  // every slot has the same compressors
    for (const CompressorState* c : {&l.compressor, &l.indexer})
      if (c->rate) {
        const int64_t entries = tokens / c->rate, per_page = limits_.page_floats / c->dim;
        pages += (entries + per_page - 1) / per_page;
      }
  return pages;
}

int64_t StatePool::pages_needed(const SequenceState& state, int64_t tokens) const {
  int64_t need = 0;
  for (const LayerState& l : state.layers)
    for (const CompressorState* c : {&l.compressor, &l.indexer})
      if (c->rate) need += std::max<int64_t>(0, c->pages_after(tokens) - static_cast<int64_t>(c->pages.size()));
  return need;
}

bool StatePool::reserve(SequenceState& state, int64_t tokens) {
  if (pages_needed(state, tokens) > free_pages()) return false;
  state.for_each_compressor([&](CompressorState& c) {
    c.ensure_room(c.n_entries + (c.n_pending + tokens) / c.rate);  // cannot fail: counted above
  });
  return true;
}

}  // namespace strata::model::v4
