#include "model/block_pool.h"

#include "core/error.h"

namespace strata::model {

BlockPool::BlockPool(int64_t block_floats, std::optional<int64_t> max_blocks)
    : block_floats_(block_floats), max_blocks_(max_blocks) {
  if (block_floats < 0) fail("block pool: block size must be ≥ 0, got ", block_floats);
  if (max_blocks) {
    if (*max_blocks < 0) fail("block pool: block count must be ≥ 0, got ", *max_blocks);
    // A bounded pool takes all of its memory now: no allocation happens while serving.
    storage_.assign(static_cast<size_t>(*max_blocks * block_floats), 0.0f);
    for (int64_t b = *max_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
    refs_.assign(static_cast<size_t>(*max_blocks), 0);
    hashes_.resize(static_cast<size_t>(*max_blocks));
  }
}

BlockPool::BlockPool(int64_t block_floats, int64_t max_blocks, std::shared_ptr<float> storage)
    : block_floats_(block_floats), max_blocks_(max_blocks), external_(std::move(storage)) {
  if (block_floats < 0) fail("block pool: block size must be ≥ 0, got ", block_floats);
  if (max_blocks < 0) fail("block pool: block count must be ≥ 0, got ", max_blocks);
  if (!external_ && max_blocks > 0 && block_floats > 0) fail("block pool: no storage for ", max_blocks, " blocks");
  for (int64_t b = max_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  refs_.assign(static_cast<size_t>(max_blocks), 0);
  hashes_.resize(static_cast<size_t>(max_blocks));
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty() && !kept_.empty()) {  // the least recently released kept block gives up its content
    const int32_t id = kept_.front();
    kept_.pop_front();
    kept_at_.erase(id);
    std::optional<BlockHash>& h = hashes_[static_cast<size_t>(id)];
    by_hash_.erase(*h);
    h.reset();
    free_.push_back(id);
    ++evicted_;
  }
  if (free_.empty()) {
    if (max_blocks_) return std::nullopt;
    storage_.resize(storage_.size() + static_cast<size_t>(block_floats_));
    free_.push_back(static_cast<int32_t>(refs_.size()));
    refs_.push_back(0);
    hashes_.emplace_back();
  }
  const int32_t id = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(id)] = 1;
  ++used_;
  return id;
}

void BlockPool::check(int32_t block, const char* what) const {
  if (block < 0 || block >= static_cast<int32_t>(refs_.size()) || refs_[static_cast<size_t>(block)] == 0)
    fail("block pool: ", what, " of block ", block, ", which is not in use");
}

void BlockPool::retain(int32_t block) {
  if (const auto it = kept_at_.find(block); it != kept_at_.end()) {
    kept_.erase(it->second);
    kept_at_.erase(it);
    refs_[static_cast<size_t>(block)] = 1;
    ++used_;
    return;
  }
  check(block, "a new reference");
  ++refs_[static_cast<size_t>(block)];
}

void BlockPool::release(int32_t block) {
  check(block, "a release");
  if (--refs_[static_cast<size_t>(block)] > 0) return;
  --used_;
  std::optional<BlockHash>& h = hashes_[static_cast<size_t>(block)];
  if (h && max_blocks_) {
    kept_at_[block] = kept_.insert(kept_.end(), block);
    return;
  }
  if (h) {
    by_hash_.erase(*h);
    h.reset();
  }
  free_.push_back(block);
}

int32_t BlockPool::references(int32_t block) const {
  if (block < 0 || block >= static_cast<int32_t>(refs_.size())) fail("block pool: no block ", block);
  return refs_[static_cast<size_t>(block)];
}

void BlockPool::set_hash(int32_t block, const BlockHash& hash) {
  check(block, "a hash");
  std::optional<BlockHash>& h = hashes_[static_cast<size_t>(block)];
  if (h) {
    if (*h == hash) return;
    fail("block pool: block ", block, " already has another content hash (a full block never changes)");
  }
  // Two sequences may compute the same block independently: the first one stays the indexed one.
  if (by_hash_.count(hash)) return;
  h = hash;
  by_hash_.emplace(hash, block);
}

std::optional<BlockHash> BlockPool::hash_of(int32_t block) const {
  check(block, "a hash lookup");
  return hashes_[static_cast<size_t>(block)];
}

std::optional<int32_t> BlockPool::find(const BlockHash& hash) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

}  // namespace strata::model
