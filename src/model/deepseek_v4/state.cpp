#include "model/deepseek_v4/state.h"

#include <algorithm>

#include "core/error.h"

namespace strata::model::v4 {

EntryPageArena::EntryPageArena(int64_t page_floats, std::optional<int64_t> max_pages)
    : page_floats_(page_floats), max_pages_(max_pages) {
  if (page_floats < 1) fail("EntryPageArena: page size must be positive, got ", page_floats);
  if (max_pages) {
    if (*max_pages < 0) fail("EntryPageArena: page count must be ≥ 0, got ", *max_pages);
    // A bounded arena takes all of its memory now: no allocation happens while serving.
    storage_.assign(static_cast<size_t>(*max_pages * page_floats), 0.0f);
    created_ = *max_pages;
    for (int64_t p = *max_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
  }
}

EntryPageArena::EntryPageArena(int64_t page_floats, int64_t max_pages, std::shared_ptr<float> storage)
    : page_floats_(page_floats), max_pages_(max_pages), external_(std::move(storage)) {
  if (page_floats < 1) fail("EntryPageArena: page size must be positive, got ", page_floats);
  if (max_pages < 0) fail("EntryPageArena: page count must be ≥ 0, got ", max_pages);
  if (!external_ && max_pages > 0) fail("EntryPageArena: no storage for ", max_pages, " pages");
  created_ = max_pages;
  for (int64_t p = max_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

std::optional<int32_t> EntryPageArena::allocate() {
  if (free_.empty()) {
    if (max_pages_) return std::nullopt;
    storage_.resize(storage_.size() + static_cast<size_t>(page_floats_));
    free_.push_back(static_cast<int32_t>(created_++));
  }
  const int32_t id = free_.back();
  free_.pop_back();
  ++used_;
  return id;
}

void EntryPageArena::release(int32_t page) {
  free_.push_back(page);
  --used_;
}

int64_t EntryPageArena::free_pages() const { return static_cast<int64_t>(free_.size()); }

int64_t CompressorState::pages_after(int64_t tokens) const {
  // Entries close whenever the running token count crosses a multiple of the rate.
  const int64_t entries = n_entries + (n_pending + tokens) / rate;
  return (entries + entries_per_page() - 1) / entries_per_page();
}

bool CompressorState::ensure_room(int64_t entries) {
  while (static_cast<int64_t>(pages.size()) * entries_per_page() < entries) {
    const auto p = arena->allocate();
    if (!p) return false;
    pages.push_back(*p);
  }
  return true;
}

void CompressorState::append_entry(const float* values) {
  if (!ensure_room(n_entries + 1))
    fail("compressed-entry pages exhausted: the scheduler must reserve pages before running a step");
  float* dst = arena->page(pages[static_cast<size_t>(n_entries / entries_per_page())]) + (n_entries % entries_per_page()) * dim;
  std::copy(values, values + dim, dst);
  ++n_entries;
}

void CompressorState::reset() {
  for (int32_t p : pages) arena->release(p);
  pages.clear();
  n_entries = 0;
  n_pending = 0;
  has_overlap = false;
}

void SequenceState::reset() {
  num_tokens = 0;
  for_each_compressor([](CompressorState& c) { c.reset(); });
}

}  // namespace strata::model::v4
