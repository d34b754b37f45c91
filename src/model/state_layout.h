#pragma once
// Where a DeepSeek-V4-family sequence's state lives (per layer a sliding window and streams of compressed entries),
// computed once per model (v4: deepseek_v4/layout.h) and shared by every backend, the state pool and state snapshots (docs/architecture.md "Where a sequence's state lives").
//
// Two kinds of memory:
//  - Fixed state, one block of `fixed_floats` floats per sequence (host memory on the CPU, device memory on a GPU):
//    per layer its sliding-window ring, and per compressor its ring of raw projections (kv, gate). Both rings are
//    indexed by absolute position (position p in row p % rows), so a step's writes never overwrite what an earlier
//    position still needs until `max_rollback` tokens later: a step is staged by construction, and committing k of
//    its n tokens is setting num_tokens (Model::rollback), with no copy.
//  - Token blocks: every compressed entry of every layer for one span of `block_tokens` tokens (the least common
//    multiple of the compression rates, 128 for V4-Flash) in one contiguous block of `block_floats` floats of a
//    BlockPool. A block is append-only while its span fills and never changes after, so sequences that share a
//    prefix share its full blocks (block_pool.h: reference counts).
#include <cstdint>
#include <vector>


namespace strata::model {

// One gated-pooling compressor (CSA's, HCA's, or the Lightning Indexer's own).
struct CompressorLayout {
  int64_t rate = 0;          // tokens per entry; 0: the layer has no such compressor
  int64_t dim = 0;           // floats per entry
  int64_t width = 0;         // projected channels per token: 2·dim with CSA's overlap, else dim
  bool overlap = false;      // an entry also pools the previous window's first-half channels (CSA)
  int64_t ring_rows = 0;     // raw projections kept: the open window (and the previous one, with overlap) + rollback
  int64_t ring_kv = 0, ring_gate = 0;  // offsets of the two rings [ring_rows, width] in the fixed block
  int64_t block_offset = 0;  // offset of this compressor's entries in a token block
  int64_t per_block = 0;     // entries per token block: block_tokens / rate

  explicit operator bool() const { return rate > 0; }
  int64_t entries(int64_t num_tokens) const { return num_tokens / rate; }  // closed windows
  // The first position whose raw projections the next entry needs: the open window's start, or with overlap the
  // previous window's.
  int64_t first_needed(int64_t num_tokens) const {
    const int64_t open = num_tokens / rate * rate;
    return overlap && open >= rate ? open - rate : open;
  }
};

struct LayerLayout {
  int64_t swa = 0;  // offset of the sliding-window ring [window_rows, head_dim]
  CompressorLayout compressor, indexer;
  const CompressorLayout& of(bool indexer_side) const { return indexer_side ? indexer : compressor; }
};

struct StateLayout {
  int64_t window = 0, head_dim = 0;
  int64_t max_rollback = 1;   // tokens a rollback may drop (Model::rollback)
  int64_t window_rows = 0;    // window + max_rollback - 1
  int64_t block_tokens = 1;   // B
  int64_t block_floats = 0;   // every compressor's entries of B tokens
  int64_t fixed_floats = 0;   // one sequence's fixed block
  int64_t smallest_rate = 0;  // 0 without compressors
  std::vector<LayerLayout> layers;
  // The MTP draft layers' sliding-window rings (docs/mtp.md), in the fixed block after every layer's: one
  // sliding-window layer each, no compressors. Their positions are the MTP's own (SequenceState::mtp_tokens), kept
  // apart from `layers` so that everything that walks the main layers (the forward, snapshots) is unchanged.
  std::vector<LayerLayout> mtp_layers;

  // Token blocks a sequence of `tokens` tokens holds: one for every span that has at least one closed window.
  int64_t blocks_for_tokens(int64_t tokens) const;
};

}  // namespace strata::model
