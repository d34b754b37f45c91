#pragma once
// What one sequence of a DeepSeek-V4-family model carries between forward calls (DESIGN.md "Per-sequence state";
// the layout in state_layout.h).
// Everything here is a pure function of the token prefix, so prefill in any chunking followed by decode reproduces
// one full forward.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/block_pool.h"
#include "model/state_layout.h"

namespace strata::model {

struct SequenceState {
  int64_t num_tokens = 0;  // positions consumed so far; the next token gets this position
  const StateLayout* layout = nullptr;  // the model's
  // The fixed block (state_layout.h): host memory on the CPU, device memory on a GPU.
  std::shared_ptr<float> fixed;
  // Block table: blocks[i] holds the compressed entries of tokens [i·B, (i+1)·B). Blocks before the one being
  // filled may be shared with other sequences; only the last, partial one is ever written.
  BlockPool* pool = nullptr;
  std::vector<int32_t> blocks;
  // Content hashes of the first block_hashes.size() blocks (all full), chained over the tokens (token_blocks.h).
  std::vector<BlockHash> block_hashes;
  std::unique_ptr<BlockPool> own_pool;  // set when the state was made without a shared pool
  // Bounded replay (Model::restore_prefix_for_replay, the prefix cache's "replay" mode): the rings hold nothing
  // below `window_floor`, so attention looks no further back than it; the entries of every window that closes at or
  // before `entries_kept_until` were restored, so the compressors do not compute them again (the blocks holding
  // them may be shared). Both 0 outside a replay; cleared once num_tokens reaches entries_kept_until.
  int64_t window_floor = 0;
  int64_t entries_kept_until = 0;
  bool replaying() const { return num_tokens < entries_kept_until; }
  // Per MTP draft layer (layout->mtp_layers), the positions its sliding window holds: MTP position i combines the
  // main model's hidden streams at position i with the token at i + 1, so it trails num_tokens while the runner
  // catches up and runs ahead of it while drafting (docs/mtp.md). Rolled back on its own (rollback_mtp).
  std::vector<int64_t> mtp_tokens;
  // Whether the compressor keeps (does not compute) the entry of window `w` at `rate` tokens per entry.
  bool keeps_entry(int64_t w, int64_t rate) const { return (w + 1) * rate <= entries_kept_until; }

  const LayerLayout& layer(int64_t l) const { return layout->layers[static_cast<size_t>(l)]; }
  // Fixed-state rings of layer l (valid on the CPU only; on a GPU these are device addresses).
  float* swa(int64_t l) const { return fixed.get() + layer(l).swa; }
  float* ring_kv(const CompressorLayout& c) const { return fixed.get() + c.ring_kv; }
  float* ring_gate(const CompressorLayout& c) const { return fixed.get() + c.ring_gate; }
  // Entry n of compressor c (a block must hold it: Model::reserve / StatePool::reserve).
  float* entry(const CompressorLayout& c, int64_t n) const {
    return pool->block(blocks[static_cast<size_t>(n / c.per_block)]) + c.block_offset + (n % c.per_block) * c.dim;
  }

  // Blocks for `tokens` more tokens, all or nothing; false when a bounded pool lacks them.
  int64_t blocks_needed(int64_t tokens) const;
  bool ensure_blocks(int64_t tokens);
  // Hashes the full blocks not hashed yet, given the sequence's tokens (`count` ≥ num_tokens of them) and the
  // chain's salt (a model fingerprint), and publishes them in the pool (BlockPool::set_hash).
  void hash_full_blocks(const BlockHash& salt, const int32_t* tokens, int64_t count);
  // Back to an empty sequence: every block reference released, the fixed block kept for reuse.
  void reset();
  // Drops positions num_tokens' ... num_tokens - 1 (at most layout->max_rollback of them): the rings still hold what
  // the kept prefix needs. Blocks wholly past the kept prefix are released; a shared block that the kept prefix
  // ends inside becomes a private copy first (copy_block copies one block's floats on the state's device).
  void rollback(int64_t num_tokens_kept, const std::function<void(float*, const float*, int64_t)>& copy_block);
  // Keeps the first `kept` positions of MTP layer `layer` (at most layout->max_rollback dropped: its ring is indexed
  // by position like the main window, so no copy).
  void rollback_mtp(int64_t layer, int64_t kept);
};

}  // namespace strata::model
