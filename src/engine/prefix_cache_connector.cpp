#include "engine/prefix_cache_connector.h"

#include <algorithm>

namespace strata::engine {

namespace {

// Extends a sequence's block hashes to cover its first `blocks` blocks, as far as its known tokens reach: a verify
// step's accepted drafts are in the state before they are emitted (the sequence's output takes them after the
// step's connectors ran), so a block they complete is hashed at the next step, or at the sequence's finish.
void hash_blocks(Sequence& s, int64_t blocks, int64_t block_tokens) {
  std::vector<model::BlockHash>& h = s.cache->hashes;
  std::vector<int32_t> tokens(static_cast<size_t>(block_tokens));
  const auto known = static_cast<int64_t>(s.prompt.size() + s.output.size());
  blocks = std::min(blocks, known / block_tokens);
  for (auto b = static_cast<int64_t>(h.size()); b < blocks; ++b) {
    for (int64_t i = 0; i < block_tokens; ++i) tokens[static_cast<size_t>(i)] = s.token_at(b * block_tokens + i);
    h.push_back(model::next_block_hash(b == 0 ? s.cache->salt : h.back(), tokens.data(), block_tokens));
  }
}

}  // namespace

int64_t PrefixCacheConnector::load(Sequence& s, model::SequenceState& state) {
  if (!s.cache) return 0;
  const int64_t B = cache_->block_tokens();
  // At least one token is left to compute: its logits pick the next token.
  int64_t seen = 0;
  const int64_t restored =
      cache_->restore(s.cache->hashes, (s.num_tokens() - 1) / B, state, s.cache->ttl_seconds, &seen);
  s.cache->seen_prefix_end = seen * B > restored ? seen * B : 0;
  // Until the first token, the latest admission is the one the usage reports (an admission can fail for blocks and
  // be retried after other sequences finish).
  if (s.output.empty()) s.cache->cached_tokens = std::min<int64_t>(restored, static_cast<int64_t>(s.prompt.size()));
  return restored;
}

int64_t PrefixCacheConnector::chunk_end(const Sequence& s, int64_t start) const {
  const auto prompt = static_cast<int64_t>(s.prompt.size());
  if (!s.cache || start >= prompt) return INT64_MAX;
  const int64_t B = cache_->block_tokens();
  const int64_t every = cache_->config().checkpoint_every_blocks * B;
  // The next multiple of `every`, and the prompt's last block boundary short of its end (where a repeat of this
  // prompt, or a longer one that extends it, resumes).
  int64_t end = (start / every + 1) * every;
  const int64_t last = (prompt - 1) / B * B;
  if (last > start) end = std::min(end, last);
  if (s.cache->seen_prefix_end > start) end = std::min(end, s.cache->seen_prefix_end);
  return end;
}

void PrefixCacheConnector::after_step(Sequence& s, model::SequenceState& state) {
  if (!s.cache) return;
  const int64_t B = cache_->block_tokens();
  const int64_t n = state.num_tokens;
  // Full blocks are published in the state pool under their hashes: a sequence admitted later with the same
  // prefix shares them instead of loading copies.
  int64_t full = std::min<int64_t>(n / B, static_cast<int64_t>(state.blocks.size()));
  if (static_cast<int64_t>(s.cache->hashes.size()) < full) hash_blocks(s, full, B);
  full = std::min(full, static_cast<int64_t>(s.cache->hashes.size()));
  for (auto i = static_cast<int64_t>(state.block_hashes.size()); i < full; ++i) {
    pool_.blocks().set_hash(state.blocks[static_cast<size_t>(i)], s.cache->hashes[static_cast<size_t>(i)]);
    state.block_hashes.push_back(s.cache->hashes[static_cast<size_t>(i)]);
  }
  if (n == 0 || n % B != 0) return;
  const auto prompt = static_cast<int64_t>(s.prompt.size());
  if (n <= prompt) {
    // A prefill checkpoint (cache_chunk_end stopped the span here) or a span that ended here by chance.
    const int64_t every = cache_->config().checkpoint_every_blocks * B;
    if (n % every == 0 || n == (prompt - 1) / B * B || n == s.cache->seen_prefix_end)
      cache_->save(state, s.cache->hashes, s.cache->ttl_seconds);
    return;
  }
  s.cache->staged_rows = cache_->rows_of(state);
  s.cache->staged_blocks = n / B;
}

void PrefixCacheConnector::on_finish(Sequence& s, const model::SequenceState& state) {
  if (!s.cache || s.cache->staged_blocks == 0) return;
  if (static_cast<int64_t>(state.blocks.size()) < s.cache->staged_blocks ||
      state.num_tokens < s.cache->staged_blocks * cache_->block_tokens())
    return;  // preempted and not recomputed that far again
  // The staged boundary's tokens are known now, unless the sequence ended inside the step that reached it (drafts
  // accepted past its end are in the state but never emitted): then there is nothing to name the entry by.
  hash_blocks(s, s.cache->staged_blocks, cache_->block_tokens());
  if (static_cast<int64_t>(s.cache->hashes.size()) < s.cache->staged_blocks) return;
  cache_->save_with_rows(state, s.cache->hashes, s.cache->staged_blocks, std::move(s.cache->staged_rows),
                             s.cache->ttl_seconds);
  s.cache->staged_rows.clear();
  s.cache->staged_blocks = 0;
}

std::optional<int64_t> PrefixCacheConnector::reported_cached_tokens(Sequence& s) {
  if (!s.cache) return std::nullopt;
  cache_->count_miss(static_cast<int64_t>(s.prompt.size()) - s.cache->cached_tokens);
  return s.cache->cached_tokens;
}

}  // namespace strata::engine
