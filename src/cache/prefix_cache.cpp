#include "cache/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "core/error.h"

namespace strata::cache {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

const char* reuse_mode_name(ReuseMode mode) { return mode == ReuseMode::Exact ? "exact" : "replay"; }

PrefixCache::PrefixCache(const model::Model& model, CacheConfig config)
    : model_(model),
      cfg_(std::move(config)),
      block_tokens_(model.state_layout().block_tokens),
      block_bytes_(model.state_layout().block_floats * static_cast<int64_t>(sizeof(float))),
      store_(model.fingerprint(), cfg_.store) {
  if (cfg_.checkpoint_every_blocks < 1)
    fail("cache: checkpoints every ", cfg_.checkpoint_every_blocks, " blocks: must be ≥ 1");
  if (cfg_.ttl_chat_seconds < 1 || cfg_.ttl_agent_seconds < 1)
    fail("cache: a time to live must be at least 1 s (chat ", cfg_.ttl_chat_seconds, " s, agent ",
         cfg_.ttl_agent_seconds, " s)");
  if (model.state_layout().block_floats == 0)
    fail("cache: this model keeps no token blocks (no compressed attention), so it has no prefix to cache");
  if (cfg_.mode == ReuseMode::Replay && cfg_.replay_tokens < model.config().sliding_window)
    fail("cache: replay mode re-runs ", cfg_.replay_tokens, " tokens, fewer than the model's sliding window (",
         model.config().sliding_window, ") it must rebuild");
}

model::BlockHash PrefixCache::salt(const std::string& scope) const {
  const model::ModelFingerprint fp = model_.fingerprint();
  std::string bytes(reinterpret_cast<const char*>(&fp.low), sizeof fp.low);
  bytes.append(reinterpret_cast<const char*>(&fp.high), sizeof fp.high);
  // The modes never share blocks: a block computed after a replay is an approximation an exact hit must not use.
  bytes += cfg_.mode == ReuseMode::Exact ? 'e' : 'r';
  bytes += scope;
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return {h.low64, h.high64};
}

std::vector<std::shared_ptr<const std::string>> PrefixCache::load_blocks(const std::vector<model::BlockHash>& hashes,
                                                                         const std::vector<Tier>& tiers, int64_t ttl) {
  const size_t k = tiers.size();
  std::vector<std::shared_ptr<const std::string>> out(k);
  std::vector<size_t> from_disk;
  for (size_t i = 0; i < k; ++i) {
    if (tiers[i] == Tier::Gpu) continue;
    if (tiers[i] == Tier::Disk) from_disk.push_back(i);
    else out[i] = store_.load({EntryKind::Block, hashes[i]}, ttl);
  }
  // Files are read several at a time: one read at a time leaves a disk's queue (and an NFS mount's round trips)
  // mostly idle. KvStore::load reads outside its lock.
  std::atomic<size_t> next{0};
  auto reader = [&] {
    for (size_t j = next++; j < from_disk.size(); j = next++)
      out[from_disk[j]] = store_.load({EntryKind::Block, hashes[from_disk[j]]}, ttl);
  };
  std::vector<std::thread> readers;
  for (size_t t = 1; t < std::min<size_t>(kParallelReads, from_disk.size()); ++t) readers.emplace_back(reader);
  reader();
  for (std::thread& t : readers) t.join();
  return out;
}

int64_t PrefixCache::restore(const std::vector<model::BlockHash>& hashes, int64_t max_blocks,
                             model::SequenceState& into, int64_t ttl, int64_t* seen_blocks) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t limit = std::min<int64_t>(max_blocks, static_cast<int64_t>(hashes.size()));
  {
    std::lock_guard lock(mu_);
    ++stats_.lookups;
  }
  // How far the blocks reach (in the state pool, or the store), then the longest such prefix with its rows.
  std::vector<Tier> tiers;
  for (int64_t i = 0; i < limit; ++i) {
    const model::BlockHash& h = hashes[static_cast<size_t>(i)];
    if (into.pool->find(h)) tiers.push_back(Tier::Gpu);
    else if (const Tier t = store_.find({EntryKind::Block, h}); t != Tier::None) tiers.push_back(t);
    else break;
  }
  int64_t k = static_cast<int64_t>(tiers.size());
  if (seen_blocks) *seen_blocks = k;
  const bool replay = cfg_.mode == ReuseMode::Replay;
  if (replay) {
    if (k * block_tokens_ <= cfg_.replay_tokens) return 0;  // nothing would be left not to compute
  } else {
    while (k > 0 && store_.find({EntryKind::Rows, hashes[static_cast<size_t>(k - 1)]}) == Tier::None) --k;
    if (k == 0) return 0;
  }
  const int64_t restored = replay ? k * block_tokens_ - cfg_.replay_tokens : k * block_tokens_;

  std::vector<std::shared_ptr<const std::string>> payloads;  // keeps host copies alive through the restore
  std::vector<model::Model::PrefixBlock> blocks;
  std::shared_ptr<const std::string> rows;
  if (!replay) rows = store_.load({EntryKind::Rows, hashes[static_cast<size_t>(k - 1)]}, ttl);
  bool ok = replay || rows != nullptr;
  std::vector<std::optional<int32_t>> shared(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const model::BlockHash& h = hashes[static_cast<size_t>(i)];
    Tier& tier = tiers[static_cast<size_t>(i)];
    shared[static_cast<size_t>(i)] = into.pool->find(h);
    if (shared[static_cast<size_t>(i)]) tier = Tier::Gpu;
    else if (tier == Tier::Gpu) tier = store_.find({EntryKind::Block, h});  // (a pool block reused since)
  }
  tiers.resize(static_cast<size_t>(k));
  if (ok) payloads = load_blocks(hashes, tiers, ttl);
  for (int64_t i = 0; i < k && ok; ++i) {
    if (const std::optional<int32_t> id = shared[static_cast<size_t>(i)]) {
      blocks.push_back({*id, nullptr});
      continue;
    }
    const std::shared_ptr<const std::string>& p = payloads[static_cast<size_t>(i)];
    if (!p || static_cast<int64_t>(p->size()) != block_bytes_) {
      ok = false;
      break;
    }
    blocks.push_back({-1, reinterpret_cast<const float*>(p->data())});
  }
  if (ok) {
    try {
      if (replay) model_.restore_prefix_for_replay(blocks, restored, into);
      else model_.restore_prefix(blocks, *rows, into);
    } catch (const Error&) {
      ok = false;  // e.g. the pool is out of blocks, or rows that do not fit: computed instead
    }
  }
  std::lock_guard lock(mu_);
  if (!ok) {
    into.reset();
    ++stats_.restore_failures;
    return 0;
  }
  into.block_hashes.assign(hashes.begin(), hashes.begin() + k);
  for (int64_t i = 0; i < k; ++i) into.pool->set_hash(into.blocks[static_cast<size_t>(i)], hashes[static_cast<size_t>(i)]);
  ++stats_.hits;
  ++stats_.restores;
  for (int64_t i = 0; i < k; ++i)  // (replay mode: the replayed tokens are computed, so not hits)
    stats_.hit_tokens[static_cast<size_t>(tiers[static_cast<size_t>(i)])] +=
        std::clamp<int64_t>(restored - i * block_tokens_, 0, block_tokens_);
  stats_.restore_seconds += seconds_since(start);
  return restored;
}

void PrefixCache::save(const model::SequenceState& state, const std::vector<model::BlockHash>& hashes, int64_t ttl) {
  if (state.num_tokens % block_tokens_ != 0)
    fail("cache: a save at ", state.num_tokens, " tokens, not a block boundary (", block_tokens_, " tokens)");
  save_with_rows(state, hashes, state.num_tokens / block_tokens_, rows_of(state), ttl);
}

std::string PrefixCache::rows_of(const model::SequenceState& state) const {
  return cfg_.mode == ReuseMode::Exact ? model_.boundary_rows(state) : std::string();
}

void PrefixCache::save_with_rows(const model::SequenceState& state, const std::vector<model::BlockHash>& hashes,
                                 int64_t k, std::string rows, int64_t ttl) {
  const auto start = std::chrono::steady_clock::now();
  if (k < 1 || k > static_cast<int64_t>(hashes.size()) || k > static_cast<int64_t>(state.blocks.size()) ||
      k * block_tokens_ > state.num_tokens)
    fail("cache: a save of ", k, " blocks from a state of ", state.num_tokens, " tokens with ", hashes.size(),
         " hashes");
  int64_t saved = 0;
  for (int64_t i = 0; i < k; ++i) {
    const EntryKey key{EntryKind::Block, hashes[static_cast<size_t>(i)]};
    if (store_.find(key) != Tier::None) continue;
    std::string bytes(static_cast<size_t>(block_bytes_), '\0');
    model_.read_block(state, i, reinterpret_cast<float*>(bytes.data()));
    store_.store(key, std::move(bytes), ttl);
    ++saved;
  }
  // Rows last: a prefix is resumable once its rows are found, so its blocks must already be there.
  const bool exact = cfg_.mode == ReuseMode::Exact;
  if (exact) store_.store({EntryKind::Rows, hashes[static_cast<size_t>(k - 1)]}, std::move(rows), ttl);
  std::lock_guard lock(mu_);
  stats_.saved_blocks += saved;
  stats_.saved_rows += exact;
  stats_.save_seconds += seconds_since(start);
}

void PrefixCache::count_miss(int64_t tokens) {
  std::lock_guard lock(mu_);
  stats_.miss_tokens += tokens;
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s;
  {
    std::lock_guard lock(mu_);
    s = stats_;
  }
  s.store = store_.stats();
  return s;
}

}  // namespace strata::cache
