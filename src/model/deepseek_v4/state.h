#pragma once
// What one sequence carries between forward calls (DESIGN.md "Per-sequence state"). Everything here is a pure
// function of the token prefix, so prefill in any chunking followed by decode reproduces one full forward.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace strata::model::v4 {

// Fixed-size pages for compressed entries, shared by the sequences of one pool. A page is `page_floats` floats and
// holds page_floats / dim entries of one compressor. With a page limit the memory is bounded up front; without
// one (a lone sequence in tests or the CLI) the arena grows.
class EntryPageArena {
 public:
  static constexpr int64_t kDefaultPageFloats = 16384;  // 64 KiB: 32 entries of 512, 128 of 128
  explicit EntryPageArena(int64_t page_floats = kDefaultPageFloats, std::optional<int64_t> max_pages = std::nullopt);
  // A bounded arena over storage someone else allocated (a GPU backend's device memory: the host never reads
  // these pages, it only hands out their ids and addresses).
  EntryPageArena(int64_t page_floats, int64_t max_pages, std::shared_ptr<float> storage);

  std::optional<int32_t> allocate();  // nullopt when a bounded arena is full
  void release(int32_t page);
  float* page(int32_t id) { return base() + static_cast<size_t>(id) * static_cast<size_t>(page_floats_); }
  const float* page(int32_t id) const { return base() + static_cast<size_t>(id) * static_cast<size_t>(page_floats_); }
  float* base() { return external_ ? external_.get() : storage_.data(); }
  const float* base() const { return external_ ? external_.get() : storage_.data(); }
  int64_t page_floats() const { return page_floats_; }
  int64_t free_pages() const;  // for a growable arena: pages allocated but unused
  int64_t used_pages() const { return used_; }
  std::optional<int64_t> max_pages() const { return max_pages_; }

 private:
  int64_t page_floats_;
  std::optional<int64_t> max_pages_;
  std::vector<float> storage_;
  std::shared_ptr<float> external_;
  std::vector<int32_t> free_;
  int64_t used_ = 0, created_ = 0;
};

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
  // Append-only compressed entries in arena pages; entry n pools tokens [n·rate, (n+1)·rate).
  EntryPageArena* arena = nullptr;
  std::vector<int32_t> pages;
  int64_t n_entries = 0;

  int64_t entries_per_page() const { return arena->page_floats() / dim; }
  const float* entry(int64_t n) const {
    return arena->page(pages[static_cast<size_t>(n / entries_per_page())]) + (n % entries_per_page()) * dim;
  }
  // Pages this compressor needs in total once `tokens` more tokens have been consumed.
  int64_t pages_after(int64_t tokens) const;
  // Room for the next entry; false when a bounded arena is out of pages (callers reserve ahead; see StatePool).
  bool ensure_room(int64_t entries);
  void append_entry(const float* values);
  void reset();  // empty, pages back to the arena
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
  std::unique_ptr<EntryPageArena> own_arena;  // set when the state was made without a shared arena
  // A GPU backend's per-sequence fixed state (its sliding windows and compressor buffers live on the device; the
  // host vectors above stay empty then, while counters and page lists are kept here on the host).
  std::shared_ptr<void> device_state;

  // Every compressor of the sequence, for bookkeeping that treats them alike.
  template <typename Fn>
  void for_each_compressor(Fn&& fn) {
    for (LayerState& l : layers) {
      if (l.compressor.rate) fn(l.compressor);
      if (l.indexer.rate) fn(l.indexer);
    }
  }
  void reset();  // back to an empty sequence (pages returned), keeping the fixed buffers for reuse
};

}  // namespace strata::model::v4
