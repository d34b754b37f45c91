#pragma once
// Content hashes of token blocks: block i's hash is XXH3-128 over (block i-1's hash, the block's token ids), and
// block 0 chains from a salt (a model fingerprint), so a hash names a whole token prefix on one model. Two sequences
// agree on block i's hash exactly when they agree on every token up to the end of block i (up to hash collisions).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace strata::model {

struct BlockHash {
  uint64_t low = 0, high = 0;
  bool operator==(const BlockHash&) const = default;
};
struct BlockHashKey {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.low ^ (h.high * 0x9e3779b97f4a7c15ULL)); }
};

// The hash of the block of `tokens[0, count)` that follows a block with hash `previous` (the salt for block 0).
BlockHash next_block_hash(const BlockHash& previous, const int32_t* tokens, int64_t count);

// The hashes of every full block of `block_tokens` tokens of `tokens`, chained from `salt`.
std::vector<BlockHash> block_hashes(const BlockHash& salt, const std::vector<int32_t>& tokens, int64_t block_tokens);

}  // namespace strata::model
