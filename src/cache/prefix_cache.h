#pragma once
// The KV-cache system's model-facing half: a request's prompt is matched, block by block, against prefixes computed
// before (by this engine, an earlier run, or another server sharing the cache directory), and the longest one that
// can be resumed exactly is restored into the sequence's state, so only the rest is prefilled.
//
// A prefix is resumable at a block boundary n = k·B (B = the state layout's block_tokens) when its k token blocks
// and its boundary rows at n are all cached ("exact" mode: the restored state is the one a cold prefill reaches, bit
// for bit), or in "replay" mode when its k blocks are (the state then stands at n - replay_tokens, and the engine's
// prefill of the rest replays those tokens first: Model::restore_prefix_for_replay). Blocks come from the engine's state pool when another sequence holds them (tier gpu: shared by
// reference, no copy) or from the store (kv_store.h: host memory, then the directory). Prefix hashes are chained
// over the tokens from a salt of the model fingerprint and the request's isolation scope (salt()), so
// tenants never see each other's entries.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/kv_store.h"
#include "model/model.h"

namespace strata::cache {

// What a checkpoint keeps (docs/kv_cache.md "Two reuse modes").
enum class ReuseMode {
  Exact,   // token blocks + boundary rows: a hit resumes bit for bit where a cold prefill would be
  Replay,  // token blocks only (DeepSeek's bounded replay): a hit re-runs the prefix's last replay_tokens tokens to
           // rebuild the sliding window and the compressors' rings, approximately
};
const char* reuse_mode_name(ReuseMode mode);

struct CacheConfig {
  StoreConfig store;
  ReuseMode mode = ReuseMode::Exact;
  int64_t replay_tokens = 140;  // replay mode: tokens re-run before a hit's boundary (≥ the sliding window)
  // Prefill checkpoints: every this many blocks of a long prompt (besides its last block boundary).
  int64_t checkpoint_every_blocks = 32;
  int64_t ttl_chat_seconds = 7 * 86400, ttl_agent_seconds = 3 * 86400;
};

struct PrefixCacheStats {
  std::array<int64_t, kTiers> hit_tokens{};    // restored prompt tokens, by the tier their block came from
  int64_t miss_tokens = 0;                      // prompt tokens of cache-enabled requests that were computed
  int64_t lookups = 0, hits = 0;
  int64_t saved_blocks = 0, saved_rows = 0, restore_failures = 0;
  int64_t restores = 0;
  double restore_seconds = 0, save_seconds = 0;  // engine-thread time: device copies and host-memory inserts
  StoreStats store;
};

class PrefixCache {
 public:
  PrefixCache(const model::Model& model, CacheConfig config);

  const CacheConfig& config() const { return cfg_; }
  int64_t block_tokens() const { return block_tokens_; }
  // The chain's salt for an isolation scope ("" = shared by everyone).
  model::BlockHash salt(const std::string& scope) const;

  // Restores into `into` the longest cached resumable prefix made of the first ≤ max_blocks of `hashes`; returns
  // the tokens restored, where `into` now stands (0: a miss, `into` reset; in replay mode the tokens to replay are
  // not counted). Counts hit tokens by tier. A damaged entry is a miss.
  // `seen_blocks`, when given, gets how many of the first blocks are cached at all (resumable or not): a prefix
  // seen before, whose end is worth a checkpoint.
  int64_t restore(const std::vector<model::BlockHash>& hashes, int64_t max_blocks, model::SequenceState& into,
                  int64_t ttl_seconds, int64_t* seen_blocks = nullptr);
  // Saves `state`, which must stand at a block boundary k·B with hashes of at least k blocks: its blocks not cached
  // yet and its boundary rows.
  void save(const model::SequenceState& state, const std::vector<model::BlockHash>& hashes, int64_t ttl_seconds);
  // The boundary rows of `state` now (for a save later, once more blocks are known to be needed).
  std::string rows_of(const model::SequenceState& state) const;
  // Saves blocks [0, k) of `state` and rows captured earlier by rows_of at the boundary k·B (in replay mode, the
  // blocks only: `rows` is ignored and may be empty).
  void save_with_rows(const model::SequenceState& state, const std::vector<model::BlockHash>& hashes, int64_t k,
                      std::string rows, int64_t ttl_seconds);
  void count_miss(int64_t tokens);

  PrefixCacheStats stats() const;
  KvStore& store() { return store_; }

 private:
  static constexpr size_t kParallelReads = 8;
  // The payloads of the first tiers.size() blocks that are not in the state pool (tier gpu); null where a load
  // failed. Directory reads run in parallel.
  std::vector<std::shared_ptr<const std::string>> load_blocks(const std::vector<model::BlockHash>& hashes,
                                                              const std::vector<Tier>& tiers, int64_t ttl);

  const model::Model& model_;
  CacheConfig cfg_;
  int64_t block_tokens_;
  int64_t block_bytes_;
  KvStore store_;
  mutable std::mutex mu_;  // stats_ (read by the server's /metrics thread)
  PrefixCacheStats stats_;
};

}  // namespace strata::cache
