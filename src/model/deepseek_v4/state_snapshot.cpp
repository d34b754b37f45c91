#include "model/deepseek_v4/state_snapshot.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "core/error.h"

namespace strata::model::v4 {

// The format says little-endian; numbers are written as this machine holds them.
static_assert(std::endian::native == std::endian::little, "state snapshots are written little-endian");

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', '4', 'S'};
constexpr char kRowsMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', '4', 'R'};
const char* magic_of(Sections s) { return s == Sections::Full ? kMagic : kRowsMagic; }
// Version 3 added the MTP layers' sections (and their count in the header); version 2 still restores.
constexpr uint32_t kVersion = 3, kOldestVersion = 2;
// The preamble's flags word. Bit 0: the floats are in a shared region, each run in a layer body replaced by its
// offset there (i64, in floats): a same-host transfer's skeleton.
constexpr uint32_t kFlagFloatsShared = 1;
constexpr size_t kPreambleBytes = 16;  // magic, version, reserved
constexpr size_t kLengthBytes = 8, kChecksumBytes = 8;

std::string hex64(uint64_t v) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(v));
  return out;
}

std::string layer_where(int64_t l) { return cat("layer ", l, "'s section"); }

// A ring of `ring_rows` rows of `width` floats where position p lives in row p % ring_rows (state_layout.h): the
// rows of positions [first, first + count) as at most two contiguous runs, in position order.
template <typename Fn>
void for_ring_runs(int64_t ring_rows, int64_t width, int64_t first, int64_t count, Fn&& run) {
  if (count > ring_rows) fail("state snapshot: ", count, " positions do not fit a ring of ", ring_rows, " rows");
  while (count > 0) {
    const int64_t row = first % ring_rows, n = std::min(count, ring_rows - row);
    run(row * width, n * width);
    first += n;
    count -= n;
  }
}

void check_state_of(const Model& model, const SequenceState& s, const char* role) {
  if (s.layout != &model.state_layout())
    fail("state snapshot: the ", role, " state is not a state of this model (", model.config().num_hidden_layers,
         " layers, ", device_name(model.device()), ")");
}

}  // namespace

// Where a snapshot's floats go: into its bytes (Inline), into a shared region with only their offset in the bytes
// (same-host transfer), or nowhere (counting them).
struct FloatPlacement {
  enum Kind { Inline, Region, Count } kind = Inline;
  model::SharedRegion* region = nullptr;  // Region
  int64_t* next = nullptr;                // Region, Count: the next run's offset in floats
};

class ByteWriter {
 public:
  ByteWriter() = default;
  explicit ByteWriter(FloatPlacement placement) : placement_(placement) {}
  void u32(uint32_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void u64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void text(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  // n floats of the backend's memory, staged on the host (the string's bytes need not be aligned for floats).
  void floats(ForwardRunner& runner, const float* src, int64_t n) {
    if (n == 0) return;
    if (placement_.kind != FloatPlacement::Inline) {
      const int64_t at = *placement_.next;
      *placement_.next += n;
      if (placement_.kind == FloatPlacement::Count) return;
      if (*placement_.next > placement_.region->floats())
        fail("state snapshot: the shared region holds ", placement_.region->floats(), " floats, the state more");
      i64(at);
      region_copies_.push_back({placement_.region->data() + at, src, n});
      return;
    }
    staging_.resize(static_cast<size_t>(n));
    runner.to_host(staging_.data(), src, n);
    out_.append(reinterpret_cast<const char*>(staging_.data()), static_cast<size_t>(n) * sizeof(float));
  }
  // The body written so far as a section: its length, the body, its checksum.
  std::string section() const {
    ByteWriter s;
    s.u64(out_.size());
    s.out_ += out_;
    s.u64(XXH3_64bits(out_.data(), out_.size()));
    return std::move(s.out_);
  }
  std::string& bytes() { return out_; }
  // Queues the runs bound for the shared region, all in one go (a layer's few dozen runs: one launch, not one
  // copy call each).
  void copy_to_region(ForwardRunner& runner) {
    runner.copy_floats_many(region_copies_);
    region_copies_.clear();
  }

 private:
  std::string out_;
  std::vector<ForwardRunner::DeviceCopy> region_copies_;
  std::vector<float> staging_;
  FloatPlacement placement_;
};

namespace {

class ByteReader {
 public:
  ByteReader(std::string_view bytes, std::string where, const model::SharedRegion* region = nullptr)
      : bytes_(bytes), where_(std::move(where)), region_(region) {}
  uint64_t u64() {
    uint64_t v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  // A count that must lie in [lo, hi].
  int64_t count(const char* what, int64_t lo, int64_t hi) {
    const int64_t v = i64();
    if (v < lo || v > hi)
      fail("state snapshot: ", where_, ": ", what, " is ", v, ", expected ", lo == hi ? cat(lo) : cat(lo, "…", hi));
    return v;
  }
  std::string text() {
    const uint64_t n = u64();
    if (n > bytes_.size()) short_of(n);
    return std::string(take(n), n);
  }
  // n floats into the backend's memory at dst.
  void floats(ForwardRunner& runner, float* dst, int64_t n) {
    if (n == 0) return;
    if (region_) {  // a skeleton: the run's offset in the shared region
      const int64_t at = i64();
      if (at < 0 || at > region_->floats() - n)
        fail("state snapshot: ", where_, ": floats [", at, ", ", at + n, ") lie outside the shared region's ",
             region_->floats());
      region_copies_.push_back({dst, region_->data() + at, n});
      return;
    }
    staging_.resize(static_cast<size_t>(n));
    std::memcpy(staging_.data(), take(static_cast<size_t>(n) * sizeof(float)), static_cast<size_t>(n) * sizeof(float));
    runner.from_host(dst, staging_.data(), n);
  }
  // The section is whole: its runs from the shared region are queued, all in one go.
  void expect_end(ForwardRunner* runner = nullptr) {
    if (!bytes_.empty()) fail("state snapshot: ", where_, " has ", bytes_.size(), " bytes more than its counts say");
    if (runner) runner->copy_floats_many(region_copies_);
    region_copies_.clear();
  }

 private:
  const char* take(size_t n) {
    if (n > bytes_.size()) short_of(n);
    const char* p = bytes_.data();
    bytes_.remove_prefix(n);
    return p;
  }
  [[noreturn]] void short_of(size_t n) const {
    fail("state snapshot: ", where_, " ends early: its counts need ", n, " more bytes, ", bytes_.size(), " are left");
  }
  std::string_view bytes_;
  std::string where_;
  const model::SharedRegion* region_;
  std::vector<float> staging_;
  std::vector<ForwardRunner::DeviceCopy> region_copies_;
};

uint64_t load_u64(std::string_view bytes, size_t at) {
  uint64_t v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// A section's body, checked: `piece` must hold exactly the section that starts at `at`.
std::string_view open_section(std::string_view piece, size_t at, const std::string& where) {
  if (piece.size() < at + kLengthBytes)
    fail("state snapshot: truncated in ", where, " (", piece.size() - std::min(piece.size(), at),
         " bytes, not even its length)");
  const uint64_t body = load_u64(piece, at);
  const uint64_t room = piece.size() - at - kLengthBytes;
  if (body > room || room - body < kChecksumBytes)
    fail("state snapshot: truncated in ", where, " (has ", piece.size() - at, " of its ",
         body > UINT64_MAX - kLengthBytes - kChecksumBytes ? std::string("(impossible length)")
                                                           : std::to_string(body + kLengthBytes + kChecksumBytes),
         " bytes)");
  if (room - body > kChecksumBytes)
    fail("state snapshot: ", where, " is followed by ", room - body - kChecksumBytes, " unexpected bytes");
  const std::string_view b = piece.substr(at + kLengthBytes, body);
  const uint64_t stored = load_u64(piece, at + kLengthBytes + body), computed = XXH3_64bits(b.data(), b.size());
  if (stored != computed)
    fail("state snapshot: checksum mismatch in ", where, " (stored ", hex64(stored), ", computed ", hex64(computed),
         "): the bytes were damaged");
  return b;
}

}  // namespace

SnapshotWriter::SnapshotWriter(const Model& model, const SequenceState& state, Sections sections,
                               model::SharedRegion* floats_into)
    : model_(model), state_(state), sections_(sections), floats_into_(floats_into) {
  if (floats_into && sections != Sections::Full) fail("state snapshot: boundary rows are never written to a shared region");
  check_state_of(model, state, "snapshot's");
  // Its rings lack the rows below the window floor until the replay ends (sequence_state.h).
  if (state.replaying())
    fail("state snapshot: the state is rebuilding its window by bounded replay up to position ",
         state.entries_kept_until, " (now at ", state.num_tokens, ")");
}

std::string SnapshotWriter::header() const {
  const ModelConfig& cfg = model_.config();
  const ModelFingerprint fp = model_.fingerprint();
  ByteWriter body;
  body.u64(fp.low);
  body.u64(fp.high);
  body.text(model_.fingerprint_->backend);
  body.i64(state_.num_tokens);
  body.i64(cfg.sliding_window);
  body.i64(cfg.head_dim);
  body.i64(static_cast<int64_t>(state_.layout->layers.size()));
  for (const LayerLayout& l : state_.layout->layers)
    for (const CompressorLayout* c : {&l.compressor, &l.indexer}) {
      body.i64(c->rate);
      body.i64(c->width);
      body.i64(c->dim);
    }
  body.i64(mtp_layers());
  ByteWriter out;
  out.bytes().append(magic_of(sections_), sizeof kMagic);
  out.u32(kVersion);
  out.u32(floats_into_ ? kFlagFloatsShared : 0);
  return out.bytes() + body.section();
}

int64_t SnapshotWriter::floats() const {
  int64_t count = 0;
  for (int64_t l = 0; l < layers(); ++l) layer_body(l, FloatPlacement{FloatPlacement::Count, nullptr, &count});
  return count;
}

std::string SnapshotWriter::layer(int64_t l) const {
  if (!floats_into_) return layer_body(l, {}).section();
  // Layers are written in order, each run after the previous one's in the region.
  if (l == 0) next_float_ = 0;
  ByteWriter body = layer_body(l, FloatPlacement{FloatPlacement::Region, floats_into_, &next_float_});
  body.copy_to_region(*model_.runner_);
  std::string piece = body.section();
  model_.runner_->synchronize();  // the piece may go to another process at once: its floats must be in place
  return piece;
}

int64_t SnapshotWriter::mtp_layers() const {
  return sections_ == Sections::Full ? static_cast<int64_t>(state_.layout->mtp_layers.size()) : 0;
}

ByteWriter SnapshotWriter::mtp_body(int64_t i, FloatPlacement placement) const {
  const ModelConfig& cfg = model_.config();
  const StateLayout& layout = *state_.layout;
  if (static_cast<int64_t>(state_.mtp_tokens.size()) <= i)
    fail("state snapshot: the state has no position count for MTP layer ", i, " (it has ", state_.mtp_tokens.size(),
         ")");
  const int64_t m = state_.mtp_tokens[static_cast<size_t>(i)];
  ByteWriter body(placement);
  body.i64(static_cast<int64_t>(layout.layers.size()) + i);
  body.i64(m);
  // Only the rows the MTP layer's next step reads: a function of what it consumed, whatever the ring held before.
  const int64_t rows = std::min(m, cfg.sliding_window);
  body.i64(rows);
  const float* swa = state_.fixed.get() + layout.mtp_layers[static_cast<size_t>(i)].swa;
  for_ring_runs(layout.window_rows, cfg.head_dim, m - rows, rows,
                [&](int64_t at, int64_t floats) { body.floats(*model_.runner_, swa + at, floats); });
  return body;
}

ByteWriter SnapshotWriter::layer_body(int64_t l, FloatPlacement placement) const {
  if (l < 0 || l >= layers()) fail("state snapshot: no layer ", l, " (the model has ", layers(), ")");
  const StateLayout& layout = *state_.layout;
  if (l >= static_cast<int64_t>(layout.layers.size()))
    return mtp_body(l - static_cast<int64_t>(layout.layers.size()), placement);
  const ModelConfig& cfg = model_.config();
  ForwardRunner& runner = *model_.runner_;
  const LayerLayout& ll = layout.layers[static_cast<size_t>(l)];
  const int64_t n = state_.num_tokens;
  ByteWriter body(placement);
  body.i64(l);
  const int64_t rows = std::min(n, cfg.sliding_window);
  body.i64(rows);
  const float* swa = state_.fixed.get() + ll.swa;
  for_ring_runs(layout.window_rows, cfg.head_dim, n - rows, rows,
                [&](int64_t at, int64_t floats) { body.floats(runner, swa + at, floats); });
  for (const CompressorLayout* c : {&ll.compressor, &ll.indexer}) {
    if (!*c) continue;
    const int64_t first = c->first_needed(n), entries = c->entries(n);
    body.i64(first);
    body.i64(entries);
    for (const float* ring : {state_.ring_kv(*c), state_.ring_gate(*c)})
      for_ring_runs(c->ring_rows, c->width, first, n - first,
                    [&](int64_t at, int64_t floats) { body.floats(runner, ring + at, floats); });
    if (sections_ == Sections::RowsOnly) continue;
    for (int64_t e = 0; e < entries; e += c->per_block)
      body.floats(runner, state_.entry(*c, e), std::min(c->per_block, entries - e) * c->dim);
  }
  return body;
}

std::string SnapshotWriter::all() const {
  std::string out = header();
  for (int64_t l = 0; l < layers(); ++l) out += layer(l);
  return out;
}

SnapshotReader::SnapshotReader(const Model& model, SequenceState& into, Sections sections,
                               const model::SharedRegion* floats_from)
    : model_(model), into_(into), sections_(sections), floats_from_(floats_from) {
  check_state_of(model, into, "restore target");
  // Blocks an empty state holds were reserved for these bytes (a decode replica's pre-allocated slot): kept, and
  // take_layer's ensure_blocks finds them in place.
  if (sections_ == Sections::Full && (into_.num_tokens > 0 || !into_.block_hashes.empty() || into_.replaying()))
    into_.reset();
}

SnapshotReader::~SnapshotReader() {
  if (!complete()) into_.reset();  // a stream that broke off leaves no half-restored state behind
}

std::optional<size_t> SnapshotReader::next_piece_bytes(std::string_view received) const {
  size_t at = 0;
  if (!header_taken_) {
    if (received.size() >= sizeof kMagic && std::memcmp(received.data(), magic_of(sections_), sizeof kMagic) != 0)
      fail(sections_ == Sections::Full ? "not a Strata state snapshot (its first 8 bytes are not \"STRATA4S\")"
                                       : "not Strata boundary rows (their first 8 bytes are not \"STRATA4R\")");
    if (received.size() >= 12) {
      uint32_t version;
      std::memcpy(&version, received.data() + 8, sizeof version);
      if (version < kOldestVersion || version > kVersion)
        fail("state snapshot: unknown format version ", version, " (this strata reads versions ", kOldestVersion,
             " to ", kVersion, ")");
    }
    at = kPreambleBytes;
  }
  if (received.size() < at + kLengthBytes) return std::nullopt;
  const uint64_t body = load_u64(received, at);
  if (body > UINT64_MAX / 2) fail("state snapshot: ", header_taken_ ? section_where(next_layer_) : "the header",
                                  " claims an impossible length of ", body, " bytes");
  return at + kLengthBytes + body + kChecksumBytes;
}

void SnapshotReader::take(std::string_view piece) {
  try {
    if (complete()) fail("state snapshot: a piece after the last layer's section");
    if (!header_taken_) {
      next_piece_bytes(piece);  // the magic and the version, with their own errors
      uint32_t flags = 0;
      if (piece.size() >= kPreambleBytes) std::memcpy(&flags, piece.data() + 12, sizeof flags);
      if (flags & ~kFlagFloatsShared) fail("state snapshot: unknown flags ", flags, " in its preamble");
      if (piece.size() >= 12) std::memcpy(&version_, piece.data() + 8, sizeof version_);  // next_piece_bytes checked it
      floats_shared_ = flags & kFlagFloatsShared;
      if (floats_shared_ && !floats_from_)
        fail("state snapshot: its floats are in a shared region (a same-host transfer) that this restore was not given");
      take_header(open_section(piece, kPreambleBytes, "the header"));
    } else if (const auto main = static_cast<int64_t>(into_.layout->layers.size()); next_layer_ >= main) {
      take_mtp_layer(open_section(piece, 0, section_where(next_layer_)), next_layer_ - main);
    } else {
      take_layer(open_section(piece, 0, layer_where(next_layer_)));
    }
  } catch (...) {
    into_.reset();
    header_taken_ = false;
    next_layer_ = 0;
    throw;
  }
}

void SnapshotReader::take_all(std::string_view bytes) {
  try {
    while (!complete()) {
      const std::optional<size_t> size = next_piece_bytes(bytes);
      if (!size || *size > bytes.size())
        fail("state snapshot: truncated in ", header_taken_ ? section_where(next_layer_) : "the header", " (has ",
             bytes.size(), size ? cat(" of its ", *size) : std::string(), " bytes)");
      take(bytes.substr(0, *size));
      bytes.remove_prefix(*size);
    }
    if (!bytes.empty()) fail("state snapshot: ", bytes.size(), " unexpected bytes after the last layer's section");
  } catch (...) {
    into_.reset();
    throw;
  }
}

void SnapshotReader::take_header(std::string_view body) {
  const ModelConfig& cfg = model_.config();
  ByteReader r(body, "the header");
  ModelFingerprint theirs;
  theirs.low = r.u64();
  theirs.high = r.u64();
  const std::string their_backend = r.text();
  const ModelFingerprint ours = model_.fingerprint();
  if (theirs != ours)
    fail("snapshot was made by model fingerprint ", theirs.hex(), " (", their_backend, "), this model is ", ours.hex(),
         " (", model_.fingerprint_->backend, "): a state restores only into the same checkpoint on the same backend");
  num_tokens_ = r.count("num_tokens", 0, INT64_MAX / 2);
  const int64_t window = r.i64(), head_dim = r.i64(), layers = r.i64();
  if (window != cfg.sliding_window || head_dim != cfg.head_dim)
    fail("state snapshot: its sliding window is ", window, " × ", head_dim, ", this model's ", cfg.sliding_window,
         " × ", cfg.head_dim);
  const std::vector<LayerLayout>& ours_layers = into_.layout->layers;
  if (layers != static_cast<int64_t>(ours_layers.size()))
    fail("state snapshot: it has ", layers, " layers, the restore target ", ours_layers.size());
  for (size_t l = 0; l < ours_layers.size(); ++l)
    for (const auto& [c, name] : {std::pair{&ours_layers[l].compressor, "compressor"},
                                  std::pair{&ours_layers[l].indexer, "indexer's compressor"}}) {
      const int64_t rate = r.i64(), width = r.i64(), dim = r.i64();
      if (rate != c->rate || width != c->width || dim != c->dim)
        fail("state snapshot: layer ", l, "'s ", name, " has rate, width, dim ", rate, ", ", width, ", ", dim,
             " in the snapshot and ", c->rate, ", ", c->width, ", ", c->dim, " in the restore target");
    }
  // Version 2 has no MTP sections (the MTP layers start empty); boundary rows have none in any version.
  const auto ours_mtp = static_cast<int64_t>(into_.layout->mtp_layers.size());
  mtp_layers_ = 0;
  if (version_ >= 3) {
    const int64_t expected = sections_ == Sections::Full ? ours_mtp : 0;
    mtp_layers_ = r.i64();
    if (mtp_layers_ != expected)
      fail("state snapshot: it has ", mtp_layers_, " MTP layers' sections, expected ", expected,
           sections_ == Sections::Full ? " (the restore target's MTP layers)" : " (boundary rows carry none)");
  }
  mtp_tokens_.assign(static_cast<size_t>(ours_mtp), 0);
  r.expect_end();
  header_taken_ = true;
}

std::string SnapshotReader::section_where(int64_t l) const {
  const auto main = static_cast<int64_t>(into_.layout->layers.size());
  return l >= main ? cat("MTP layer ", l - main, "'s section") : layer_where(l);
}

void SnapshotReader::take_mtp_layer(std::string_view body, int64_t i) {
  const ModelConfig& cfg = model_.config();
  const StateLayout& layout = *into_.layout;
  ByteReader r(body, cat("MTP layer ", i, "'s section"), floats_shared_ ? floats_from_ : nullptr);
  const int64_t index = r.i64(), expected = static_cast<int64_t>(layout.layers.size()) + i;
  if (index != expected) fail("state snapshot: expected section ", expected, " (MTP layer ", i, "), found section ", index);
  const int64_t m = r.count("the MTP layer's position count", 0, INT64_MAX / 2);
  const int64_t rows = std::min(m, cfg.sliding_window);
  r.count("the MTP window's row count", rows, rows);
  float* swa = into_.fixed.get() + layout.mtp_layers[static_cast<size_t>(i)].swa;
  for_ring_runs(layout.window_rows, cfg.head_dim, m - rows, rows,
                [&](int64_t at, int64_t floats) { r.floats(*model_.runner_, swa + at, floats); });
  r.expect_end(model_.runner_.get());
  mtp_tokens_[static_cast<size_t>(i)] = m;
  ++next_layer_;
  finish_if_complete();
}

void SnapshotReader::finish_if_complete() {
  if (!complete()) return;
  if (floats_shared_) model_.runner_->synchronize();  // the region may be given back once the restore is complete
  into_.num_tokens = num_tokens_;
  for (size_t i = 0; i < mtp_tokens_.size() && i < into_.mtp_tokens.size(); ++i) into_.mtp_tokens[i] = mtp_tokens_[i];
}

void SnapshotReader::take_layer(std::string_view body) {
  const ModelConfig& cfg = model_.config();
  ForwardRunner& runner = *model_.runner_;
  const int64_t l = next_layer_;
  ByteReader r(body, layer_where(l), floats_shared_ ? floats_from_ : nullptr);
  const int64_t index = r.i64();
  if (index != l) fail("state snapshot: expected layer ", l, "'s section, found layer ", index, "'s");
  const StateLayout& layout = *into_.layout;
  const LayerLayout& ll = layout.layers[static_cast<size_t>(l)];
  const int64_t n = num_tokens_;
  const int64_t rows = std::min(n, cfg.sliding_window);
  r.count("the window's row count", rows, rows);
  float* swa = into_.fixed.get() + ll.swa;
  for_ring_runs(layout.window_rows, cfg.head_dim, n - rows, rows,
                [&](int64_t at, int64_t floats) { r.floats(runner, swa + at, floats); });
  if (sections_ == Sections::RowsOnly) {
    if (l == 0 && static_cast<int64_t>(into_.blocks.size()) < layout.blocks_for_tokens(n))
      fail("boundary rows: ", n, " tokens need ", layout.blocks_for_tokens(n), " token blocks in place, the target has ",
           into_.blocks.size());
  } else if (l == 0 && !into_.ensure_blocks(n))  // every layer's entries of a span share one token block
    fail("state snapshot: the restore target's pool is out of token blocks: ", n, " tokens need ",
         layout.blocks_for_tokens(n), ", ", into_.pool->free_blocks(), " are free");
  for (const CompressorLayout* c : {&ll.compressor, &ll.indexer}) {
    if (!*c) continue;
    // Every token enters the open window; each full window closes into one entry.
    const int64_t first = r.count("a compressor's first raw position", c->first_needed(n), c->first_needed(n));
    const int64_t entries = r.count("a compressor's entry count", c->entries(n), c->entries(n));
    for (float* ring : {into_.ring_kv(*c), into_.ring_gate(*c)})
      for_ring_runs(c->ring_rows, c->width, first, n - first,
                    [&](int64_t at, int64_t floats) { r.floats(runner, ring + at, floats); });
    if (sections_ == Sections::RowsOnly) continue;
    for (int64_t e = 0; e < entries; e += c->per_block)
      r.floats(runner, into_.entry(*c, e), std::min(c->per_block, entries - e) * c->dim);
  }
  r.expect_end(&runner);
  ++next_layer_;
  finish_if_complete();
}

std::string Model::snapshot(const SequenceState& state) const { return SnapshotWriter(*this, state).all(); }

void Model::snapshot_pieces(const SequenceState& state, const std::function<void(std::string)>& piece,
                            model::SharedRegion* floats_into) const {
  const SnapshotWriter writer(*this, state, Sections::Full, floats_into);
  piece(writer.header());
  for (int64_t l = 0; l < writer.layers(); ++l) piece(writer.layer(l));
}

namespace {

// SnapshotReader fed by a byte stream: whole pieces go straight from the caller's bytes; only a piece split across
// feeds is gathered here first.
class StreamedRestore : public model::StateRestore {
 public:
  StreamedRestore(const Model& model, SequenceState& into, const model::SharedRegion* floats_from)
      : reader_(model, into, Sections::Full, floats_from) {}

  void feed(std::string_view bytes) override {
    if (failed_) fail("state snapshot: fed after the restore failed");
    try {
      if (!pending_.empty()) {
        pending_.append(bytes);
        const size_t used = take_pieces(pending_);
        pending_.erase(0, used);
        return;
      }
      const size_t used = take_pieces(bytes);
      pending_.assign(bytes.substr(used));
    } catch (...) {
      failed_ = true;
      throw;
    }
  }
  bool complete() const override { return reader_.complete(); }
  int64_t num_tokens() const override { return reader_.num_tokens(); }
  int64_t layers_restored() const override { return reader_.layers_taken(); }

 private:
  // Takes every whole piece at the front of `bytes`; returns the bytes used.
  size_t take_pieces(std::string_view bytes) {
    size_t used = 0;
    while (used < bytes.size()) {
      if (reader_.complete())
        fail("state snapshot: ", bytes.size() - used, " unexpected bytes after the last layer's section");
      const std::optional<size_t> size = reader_.next_piece_bytes(bytes.substr(used));
      if (!size || *size > bytes.size() - used) break;
      reader_.take(bytes.substr(used, *size));
      used += *size;
    }
    return used;
  }

  SnapshotReader reader_;
  std::string pending_;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<model::StateRestore> Model::begin_restore(SequenceState& into,
                                                          const model::SharedRegion* floats_from) const {
  return std::make_unique<StreamedRestore>(*this, into, floats_from);
}

int64_t Model::snapshot_floats(const SequenceState& state) const { return SnapshotWriter(*this, state).floats(); }

void Model::restore(std::string_view bytes, SequenceState& into) const {
  SnapshotReader reader(*this, into);
  reader.take_all(bytes);
}

void Model::read_block(const SequenceState& state, int64_t index, float* host) const {
  check_state_of(*this, state, "read_block's");
  if (index < 0 || index >= static_cast<int64_t>(state.blocks.size()))
    fail("read_block: block ", index, " of a state holding ", state.blocks.size());
  runner_->to_host(host, state.pool->block(state.blocks[static_cast<size_t>(index)]), parts_->layout.block_floats);
}

std::string Model::boundary_rows(const SequenceState& state) const {
  return SnapshotWriter(*this, state, Sections::RowsOnly).all();
}

void Model::take_prefix_blocks(const std::vector<PrefixBlock>& blocks, SequenceState& into) const {
  for (const PrefixBlock& b : blocks)
    if (b.shared < 0 && !b.host) fail("restore_prefix: a block with neither a shared id nor host data");
  // Shared blocks first: one that no sequence holds is only kept by the pool (block_pool.h), and allocating the
  // copied blocks could otherwise evict it before it is taken.
  into.blocks.assign(blocks.size(), -1);
  for (size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].shared >= 0) {
      into.pool->retain(blocks[i].shared);
      into.blocks[i] = blocks[i].shared;
    }
  std::vector<ForwardRunner::HostCopy> copies;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].shared >= 0) continue;
    const std::optional<int32_t> mine = into.pool->allocate();
    if (!mine) {
      std::erase(into.blocks, -1);  // reset() releases only the blocks taken
      fail("restore_prefix: the state pool is out of token blocks (", blocks.size(), " needed)");
    }
    into.blocks[i] = *mine;
  }
  // Addresses only now: a growable pool moves its storage as it grows.
  for (size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].shared < 0) copies.push_back({into.pool->block(into.blocks[i]), blocks[i].host});
  runner_->from_host_many(copies, parts_->layout.block_floats);  // one pipeline for all of them
}

void Model::restore_prefix(const std::vector<PrefixBlock>& blocks, std::string_view rows, SequenceState& into) const {
  check_state_of(*this, into, "restore_prefix target");
  into.reset();
  try {
    take_prefix_blocks(blocks, into);
    SnapshotReader reader(*this, into, Sections::RowsOnly);
    reader.take_all(rows);
    if (into.num_tokens != static_cast<int64_t>(blocks.size()) * parts_->layout.block_tokens)
      fail("restore_prefix: boundary rows of ", into.num_tokens, " tokens with ", blocks.size(), " blocks of ",
           parts_->layout.block_tokens, " tokens");
  } catch (...) {
    into.reset();
    throw;
  }
}

void Model::restore_prefix_for_replay(const std::vector<PrefixBlock>& blocks, int64_t replay_from,
                                      SequenceState& into) const {
  check_state_of(*this, into, "restore_prefix_for_replay target");
  const StateLayout& layout = parts_->layout;
  const int64_t end = static_cast<int64_t>(blocks.size()) * layout.block_tokens;
  // From replay_from on, the replayed tokens must refill the whole window and every compressor's raw rows that the
  // first entry past `end` pools (the previous window too, with overlap).
  int64_t need = config().sliding_window;
  for (const LayerLayout& l : layout.layers)
    for (const CompressorLayout* c : {&l.compressor, &l.indexer})
      if (*c) need = std::max(need, end - c->first_needed(end));
  if (replay_from < 0 || replay_from > end - need)
    fail("restore_prefix_for_replay: replaying from position ", replay_from, " of a ", end,
         "-token prefix; the window and the compressors need the last ", need, " tokens replayed at least");
  into.reset();
  try {
    take_prefix_blocks(blocks, into);
  } catch (...) {
    into.reset();
    throw;
  }
  into.num_tokens = replay_from;
  into.window_floor = replay_from;
  into.entries_kept_until = end;
}

}  // namespace strata::model::v4
