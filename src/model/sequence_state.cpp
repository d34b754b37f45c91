#include "model/sequence_state.h"

#include <algorithm>

#include "core/error.h"

namespace strata::model {

int64_t SequenceState::blocks_needed(int64_t tokens) const {
  return std::max<int64_t>(0, layout->blocks_for_tokens(num_tokens + tokens) - static_cast<int64_t>(blocks.size()));
}

bool SequenceState::ensure_blocks(int64_t tokens) {
  const int64_t need = blocks_needed(tokens);
  if (need == 0) return true;
  if (pool->max_blocks() && pool->free_blocks() < need) return false;
  for (int64_t i = 0; i < need; ++i) blocks.push_back(*pool->allocate());
  return true;
}

void SequenceState::hash_full_blocks(const BlockHash& salt, const int32_t* tokens, int64_t count) {
  if (count < num_tokens) fail("block hashes: ", count, " tokens given for a sequence of ", num_tokens);
  const int64_t B = layout->block_tokens;
  const int64_t full = std::min<int64_t>(num_tokens / B, static_cast<int64_t>(blocks.size()));
  for (auto i = static_cast<int64_t>(block_hashes.size()); i < full; ++i) {
    const BlockHash h = next_block_hash(i == 0 ? salt : block_hashes.back(), tokens + i * B, B);
    pool->set_hash(blocks[static_cast<size_t>(i)], h);
    block_hashes.push_back(h);
  }
}

void SequenceState::reset() {
  for (int32_t b : blocks) pool->release(b);
  blocks.clear();
  block_hashes.clear();
  num_tokens = 0;
  window_floor = entries_kept_until = 0;
  std::fill(mtp_tokens.begin(), mtp_tokens.end(), 0);
}

void SequenceState::rollback(int64_t kept, const std::function<void(float*, const float*, int64_t)>& copy_block) {
  if (kept < 0 || kept > num_tokens)
    fail("rollback: cannot keep ", kept, " tokens of a sequence of ", num_tokens);
  if (replaying())
    fail("rollback: the state is rebuilding its window by bounded replay up to position ", entries_kept_until,
         " (now at ", num_tokens, ")");
  if (num_tokens - kept > layout->max_rollback)
    fail("rollback: dropping ", num_tokens - kept, " tokens, but this state's rings keep only ", layout->max_rollback,
         " droppable tokens (the model's max_rollback)");
  // Blocks past the kept prefix's last one go; the kept prefix's partial block will be written again.
  const int64_t keep_blocks = layout->blocks_for_tokens(kept);
  if (static_cast<int64_t>(block_hashes.size()) > kept / layout->block_tokens)
    block_hashes.resize(static_cast<size_t>(kept / layout->block_tokens));
  while (static_cast<int64_t>(blocks.size()) > keep_blocks) {
    pool->release(blocks.back());
    blocks.pop_back();
  }
  const int64_t block_tokens = layout->block_tokens;
  if (kept % block_tokens != 0 && keep_blocks > 0) {
    const int32_t last = blocks.back();
    // Copy on write: a block others share, or one published under its content hash, keeps its content.
    if (pool->references(last) > 1 || pool->hash_of(last)) {
      const auto mine = pool->allocate();
      if (!mine) fail("rollback: no free block for a private copy of a shared block");
      copy_block(pool->block(*mine), pool->block(last), pool->block_floats());
      pool->release(last);
      blocks.back() = *mine;
    }
  }
  num_tokens = kept;
}

void SequenceState::rollback_mtp(int64_t layer, int64_t kept) {
  if (layer < 0 || layer >= static_cast<int64_t>(mtp_tokens.size()))
    fail("rollback_mtp: no MTP layer ", layer, " (the model has ", mtp_tokens.size(), ")");
  int64_t& n = mtp_tokens[static_cast<size_t>(layer)];
  if (kept < 0 || kept > n) fail("rollback_mtp: cannot keep ", kept, " positions of an MTP layer at ", n);
  if (n - kept > layout->max_rollback)
    fail("rollback_mtp: dropping ", n - kept, " positions, but the MTP ring keeps only ", layout->max_rollback,
         " droppable ones (the model's max_rollback)");
  n = kept;
}

}  // namespace strata::model
