#include "model/token_blocks.h"

#include <xxhash.h>

#include <cstring>

#include "core/error.h"

namespace strata::model {

BlockHash next_block_hash(const BlockHash& previous, const int32_t* tokens, int64_t count) {
  XXH3_state_t* state = XXH3_createState();
  if (!state) fail("block hash: out of memory");
  XXH3_128bits_reset(state);
  const uint64_t chain[2] = {previous.low, previous.high};
  XXH3_128bits_update(state, chain, sizeof chain);
  // Token ids as little-endian 32-bit integers (the ids' values, whatever the machine).
  std::vector<unsigned char> bytes(static_cast<size_t>(count) * 4);
  for (int64_t i = 0; i < count; ++i) {
    const auto v = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) bytes[static_cast<size_t>(i * 4 + b)] = static_cast<unsigned char>(v >> (8 * b));
  }
  XXH3_128bits_update(state, bytes.data(), bytes.size());
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return {h.low64, h.high64};
}

std::vector<BlockHash> block_hashes(const BlockHash& salt, const std::vector<int32_t>& tokens, int64_t block_tokens) {
  if (block_tokens < 1) fail("block hashes: block size must be ≥ 1, got ", block_tokens);
  std::vector<BlockHash> out;
  BlockHash h = salt;
  for (size_t at = 0; at + static_cast<size_t>(block_tokens) <= tokens.size(); at += static_cast<size_t>(block_tokens)) {
    h = next_block_hash(h, tokens.data() + at, block_tokens);
    out.push_back(h);
  }
  return out;
}

}  // namespace strata::model
