// The engine's side of the prefix cache (cache/prefix_cache.h): restore at admission, checkpoints in prefill (every
// N blocks, the prompt's last block boundary, and the end of a prefix seen before), the last block boundary of
// decode saved when a sequence finishes.
#include <algorithm>

#include "engine/engine.h"

namespace strata::engine {

namespace {

// Extends a sequence's block hashes to cover its first `blocks` blocks (its known tokens must reach them).
void hash_blocks(Sequence& s, int64_t blocks, int64_t block_tokens) {
  std::vector<model::BlockHash>& h = s.cache->hashes;
  std::vector<int32_t> tokens(static_cast<size_t>(block_tokens));
  for (auto b = static_cast<int64_t>(h.size()); b < blocks; ++b) {
    for (int64_t i = 0; i < block_tokens; ++i) tokens[static_cast<size_t>(i)] = s.token_at(b * block_tokens + i);
    h.push_back(model::next_block_hash(b == 0 ? s.cache->salt : h.back(), tokens.data(), block_tokens));
  }
}

}  // namespace

int64_t Engine::cache_restore(Sequence& s, model::SequenceState& state) {
  if (!s.cache) return 0;
  const int64_t B = cfg_.cache->block_tokens();
  // At least one token is left to compute: its logits pick the next token.
  int64_t seen = 0;
  const int64_t restored =
      cfg_.cache->restore(s.cache->hashes, (s.num_tokens() - 1) / B, state, s.cache->ttl_seconds, &seen);
  s.cache->seen_prefix_end = seen * B > restored ? seen * B : 0;
  // Until the first token, the latest admission is the one the usage reports (an admission can fail for blocks and
  // be retried after other sequences finish).
  if (s.output.empty()) s.cache->cached_tokens = std::min<int64_t>(restored, static_cast<int64_t>(s.prompt.size()));
  return restored;
}

int64_t Engine::cache_chunk_end(const Sequence& s, int64_t start) const {
  const auto prompt = static_cast<int64_t>(s.prompt.size());
  if (!s.cache || start >= prompt) return INT64_MAX;
  const int64_t B = cfg_.cache->block_tokens();
  const int64_t every = cfg_.cache->config().checkpoint_every_blocks * B;
  // The next multiple of `every`, and the prompt's last block boundary short of its end (where a repeat of this
  // prompt, or a longer one that extends it, resumes).
  int64_t end = (start / every + 1) * every;
  const int64_t last = (prompt - 1) / B * B;
  if (last > start) end = std::min(end, last);
  if (s.cache->seen_prefix_end > start) end = std::min(end, s.cache->seen_prefix_end);
  return end;
}

void Engine::cache_after_step(Sequence& s) {
  if (s.slot < 0) return;
  model::SequenceState& state = pool_.slot(s.slot);
  const int64_t B = cfg_.cache->block_tokens();
  const int64_t n = state.num_tokens;
  // Full blocks are published in the state pool under their hashes: a sequence admitted later with the same
  // prefix shares them instead of loading copies.
  const int64_t full = std::min<int64_t>(n / B, static_cast<int64_t>(state.blocks.size()));
  if (static_cast<int64_t>(s.cache->hashes.size()) < full) hash_blocks(s, full, B);
  for (auto i = static_cast<int64_t>(state.block_hashes.size()); i < full; ++i) {
    pool_.blocks().set_hash(state.blocks[static_cast<size_t>(i)], s.cache->hashes[static_cast<size_t>(i)]);
    state.block_hashes.push_back(s.cache->hashes[static_cast<size_t>(i)]);
  }
  if (n == 0 || n % B != 0) return;
  const auto prompt = static_cast<int64_t>(s.prompt.size());
  if (n <= prompt) {
    // A prefill checkpoint (cache_chunk_end stopped the span here) or a span that ended here by chance.
    const int64_t every = cfg_.cache->config().checkpoint_every_blocks * B;
    if (n % every == 0 || n == (prompt - 1) / B * B || n == s.cache->seen_prefix_end)
      cfg_.cache->save(state, s.cache->hashes, s.cache->ttl_seconds);
    return;
  }
  s.cache->staged_rows = cfg_.cache->rows_of(state);
  s.cache->staged_blocks = n / B;
}

void Engine::cache_on_finish(Sequence& s) {
  if (s.slot < 0 || s.cache->staged_blocks == 0) return;
  const model::SequenceState& state = pool_.slot(s.slot);
  if (static_cast<int64_t>(state.blocks.size()) < s.cache->staged_blocks ||
      state.num_tokens < s.cache->staged_blocks * cfg_.cache->block_tokens())
    return;  // preempted and not recomputed that far again
  cfg_.cache->save_with_rows(state, s.cache->hashes, s.cache->staged_blocks, std::move(s.cache->staged_rows),
                             s.cache->ttl_seconds);
  s.cache->staged_rows.clear();
  s.cache->staged_blocks = 0;
}

}  // namespace strata::engine
