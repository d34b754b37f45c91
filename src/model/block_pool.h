#pragma once
// Token blocks of compressed state (state_layout.h), shared by the sequences of one pool. A block is handed out with
// one reference; a sequence that shares another's full block takes a reference too (Model::fork_state), and the block
// is free again when the last one is released. A full block may carry a content hash (token_blocks.h: chained over
// its token prefix, salted with the model fingerprint), so a later sequence with the same prefix can find it.
// With a block limit the memory is bounded up front; without one (a lone sequence in tests or the CLI) it grows.
//
// A bounded pool keeps hashed blocks after their last release: they stay findable (the prefix cache's GPU tier, so
// a request that repeats a finished one's prefix shares its blocks without a copy) but count as free, and the least
// recently released of them is taken when a block is needed and no never-hashed one is left. A growable pool frees
// them at once (nothing bounds it, so nothing would ever evict them).
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "model/token_blocks.h"

namespace strata::model {

class BlockPool {
 public:
  // A pool whose storage it owns (host memory), bounded to `max_blocks` or growable.
  explicit BlockPool(int64_t block_floats, std::optional<int64_t> max_blocks = std::nullopt);
  // A bounded pool over storage someone else allocated (a GPU backend's device memory: the host never reads these
  // blocks, it hands out their ids and addresses).
  BlockPool(int64_t block_floats, int64_t max_blocks, std::shared_ptr<float> storage);

  std::optional<int32_t> allocate();  // a block with one reference; nullopt when a bounded pool is full
  // One more reference; a kept block (no references, found by its hash) is taken back from the evictable ones.
  void retain(int32_t block);
  // One fewer; after the last, a hashed block of a bounded pool is kept (evictable), any other is freed.
  void release(int32_t block);
  int32_t references(int32_t block) const;

  // A full block's content hash, and the index from hashes to blocks. A hash names at most one block.
  void set_hash(int32_t block, const BlockHash& hash);
  std::optional<BlockHash> hash_of(int32_t block) const;
  std::optional<int32_t> find(const BlockHash& hash) const;

  float* block(int32_t id) { return base() + static_cast<size_t>(id) * static_cast<size_t>(block_floats_); }
  const float* block(int32_t id) const { return base() + static_cast<size_t>(id) * static_cast<size_t>(block_floats_); }
  float* base() { return external_ ? external_.get() : storage_.data(); }
  const float* base() const { return external_ ? external_.get() : storage_.data(); }
  int64_t block_floats() const { return block_floats_; }
  // Blocks allocate() can hand out: never-hashed free ones and kept ones (growable: made but unused).
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + kept_.size()); }
  int64_t used_blocks() const { return used_; }  // blocks with references
  int64_t kept_blocks() const { return static_cast<int64_t>(kept_.size()); }
  int64_t evicted_blocks() const { return evicted_; }  // kept blocks taken by allocate() so far
  std::optional<int64_t> max_blocks() const { return max_blocks_; }

 private:
  void check(int32_t block, const char* what) const;

  int64_t block_floats_;
  std::optional<int64_t> max_blocks_;
  std::vector<float> storage_;
  std::shared_ptr<float> external_;
  std::vector<int32_t> free_;
  std::vector<int32_t> refs_;  // per block made; 0 = free
  std::vector<std::optional<BlockHash>> hashes_;
  std::unordered_map<BlockHash, int32_t, BlockHashKey> by_hash_;
  // Kept blocks, least recently released first, and where each sits in that list.
  std::list<int32_t> kept_;
  std::unordered_map<int32_t, std::list<int32_t>::iterator> kept_at_;
  int64_t used_ = 0, evicted_ = 0;
};

}  // namespace strata::model
