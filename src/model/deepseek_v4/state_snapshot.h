#pragma once
// A sequence's V4 state as bytes: what a KV store saves and a prefill server ships to a decode server. The bytes
// restore into any slot of another engine whose model has the same fingerprint (fingerprint.h), which then
// continues with the same logits, bit for bit. The format is a header and one section per layer, so a transfer can
// stream it: SnapshotWriter makes the pieces one by one, SnapshotReader takes them in order as they arrive.
//
// Byte format, version 3 (version 2, without the MTP layers' sections, still restores: its MTP layers start
// empty, as every restore of a version-2 snapshot did). Integers and floats little-endian, exactly as this (little-endian) machine writes them;
// a big-endian build does not compile (static_assert in the .cpp). i64/u64 = 8 bytes, u32 = 4, f32 = 4.
//
//   piece 0, the header:
//     u8[8]  magic "STRATA4S"
//     u32    format version (3)
//     u32    flags: 0, or 1 for a same-host transfer's skeleton — the floats are in a shared region
//            (model/shared_region.h) and every f32[k] run below is an i64 offset (in floats) into it instead
//     section: the header body (below)
//   pieces 1 … layer_count: one section per layer, layer 0 first;
//   then (version 3) pieces layer_count + 1 … layer_count + mtp_layer_count: one section per MTP layer (docs/mtp.md).
//
//   section: u64 body_bytes, then body_bytes bytes of body, then u64 XXH3-64 (seed 0) of the body.
//
//   header body:
//     u64 fingerprint low half, u64 fingerprint high half  (the XXH3-128 of the model that made the snapshot)
//     u64 n, then n bytes: that model's backend label (backend_label, e.g. "cuda bf16 NVIDIA H200"; for messages)
//     i64 num_tokens                      positions consumed; the next token gets this position
//     i64 sliding_window, i64 head_dim    the sliding window's shape
//     i64 layer_count
//     per layer, for its compressor then its indexer's compressor (all 0 where the layer has none):
//       i64 rate, i64 width, i64 dim      width = channels per raw token (2·dim with CSA's overlap)
//     i64 mtp_layer_count                 (version 3) the model's MTP layers; 0 in boundary rows
//
//   layer body (n = num_tokens; rows in position order, whatever ring sizes the engines use):
//     i64 layer index
//     i64 window_rows = min(n, sliding_window); f32[window_rows · head_dim]: positions n - window_rows … n - 1
//     for its compressor then its indexer's compressor, each only where the layer has it:
//       i64 first = the first raw position the next entry needs (the open window's start; with width 2·dim the
//                   previous window's start, once there is one), i64 n_entries = n / rate
//       f32[(n - first) · width] raw kv, f32[(n - first) · width] raw gate   (positions first … n - 1)
//       f32[n_entries · dim] compressed entries, entry 0 first
//
//   MTP layer body (version 3; MTP layer i, m = the state's mtp_tokens[i], the MTP positions that layer consumed,
//   which trail or lead num_tokens: SequenceState::mtp_tokens):
//     i64 layer_count + i
//     i64 m
//     i64 window_rows = min(m, sliding_window); f32[window_rows · head_dim]: its ring's positions m - window_rows … m - 1
//
// Only rows that the forward pass reads are written, so the bytes are a function of the token prefix alone
// (whatever a reused slot held before), and two engines that agree on the prefix write the same snapshot.
//
// Boundary rows (Sections::RowsOnly, magic "STRATA4R"): the same format without the compressed entries (no
// "f32[n_entries · dim]" runs) and without MTP sections (mtp_layer_count 0: a prefix restored from the cache starts
// its MTP layers empty, which costs draft quality, never correctness — verification decides). A prefix cache (cache/) keeps a prefix as its token blocks, content-addressed and
// shared by every longer prefix, plus these rows at the boundary it resumes from; restoring one needs the blocks
// in place first (Model::restore_prefix).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/deepseek_v4/model.h"
#include "model/sequence_state.h"

namespace strata::model::v4 {

enum class Sections { Full, RowsOnly };

class ByteWriter;
struct FloatPlacement;

// Makes the pieces of one state's snapshot. The state must not advance while pieces are being made. With
// `floats_into` (a same-host transfer: Sections::Full only), the float runs go into that region, in order, and the
// pieces carry their offsets instead (the preamble's flag says so); layers must then be made in order.
class SnapshotWriter {
 public:
  SnapshotWriter(const Model& model, const SequenceState& state, Sections sections = Sections::Full,
                 model::SharedRegion* floats_into = nullptr);
  // The sections after the header: every layer's, then (Sections::Full) every MTP layer's.
  int64_t layers() const { return static_cast<int64_t>(state_.layout->layers.size()) + mtp_layers(); }
  int64_t mtp_layers() const;
  std::string header() const;          // piece 0
  std::string layer(int64_t l) const;  // piece 1 + l (l ≥ the model's layer count: MTP layer l - that count)
  std::string all() const;             // every piece, in order
  int64_t floats() const;              // the floats of every layer (what a shared region for them must hold)

 private:
  ByteWriter layer_body(int64_t l, FloatPlacement placement) const;
  ByteWriter mtp_body(int64_t i, FloatPlacement placement) const;

  const Model& model_;
  const SequenceState& state_;
  Sections sections_;
  model::SharedRegion* floats_into_;
  mutable int64_t next_float_ = 0;
};

// Restores a snapshot into `into` (a state of `model`, e.g. a StatePool slot), piece by piece: the header, then the
// layers in order. Every bad piece is an Error naming what is wrong and where; after an error `into` is reset and
// the reader expects a header again, and a reader that goes away before the last layer arrived resets `into` too.
// An empty `into` keeps the token blocks it holds (reserved ahead of the bytes); a state with tokens is reset first.
// Compressed entries take pages from `into`'s arena. With Sections::RowsOnly, `into` is not reset: it must already
// hold the token blocks of the snapshot's num_tokens (their contents are the caller's), and only rows are read.
class SnapshotReader {
 public:
  // `floats_from`: the shared region a skeleton's floats are in (same-host transfer); a skeleton without one, and
  // offsets outside it, are errors.
  SnapshotReader(const Model& model, SequenceState& into, Sections sections = Sections::Full,
                 const model::SharedRegion* floats_from = nullptr);
  ~SnapshotReader();
  SnapshotReader(const SnapshotReader&) = delete;
  SnapshotReader& operator=(const SnapshotReader&) = delete;

  // For a stream: the size of the next piece, given the bytes received from its start on (nullopt while too few
  // have arrived to tell: 24 for the header, 8 for a layer).
  std::optional<size_t> next_piece_bytes(std::string_view received) const;
  void take(std::string_view piece);  // exactly one piece
  bool complete() const {
    return header_taken_ && next_layer_ == static_cast<int64_t>(into_.layout->layers.size()) + mtp_layers_;
  }
  int64_t num_tokens() const { return header_taken_ ? num_tokens_ : -1; }  // the header's, once it is taken
  int64_t layers_taken() const { return next_layer_; }  // MTP layers' sections included

  // The whole snapshot at once: splits `bytes` into pieces (truncated or trailing bytes are errors) and takes them.
  void take_all(std::string_view bytes);

 private:
  void take_header(std::string_view body);
  void take_layer(std::string_view body);
  void take_mtp_layer(std::string_view body, int64_t i);
  void finish_if_complete();  // after the last section: the counters into the state
  std::string section_where(int64_t l) const;  // "layer l's section", or an MTP layer's

  const Model& model_;
  SequenceState& into_;
  Sections sections_;
  const model::SharedRegion* floats_from_;
  bool floats_shared_ = false;  // the header's flag
  bool header_taken_ = false;
  uint32_t version_ = 0;    // the preamble's
  int64_t mtp_layers_ = 0;  // MTP sections the snapshot has (0 in version 2 and in boundary rows)
  int64_t next_layer_ = 0, num_tokens_ = 0;
  std::vector<int64_t> mtp_tokens_;  // from the MTP sections, set into the state with num_tokens when complete
};

}  // namespace strata::model::v4
