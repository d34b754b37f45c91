// The KV-cache system end to end on the CPU: a request that resumes from a cached prefix gives the tokens and
// logprobs of a cold prefill, bit for bit, at prompt lengths around block boundaries; so does a follow-up turn that
// extends an earlier request, a restarted engine reading the cache directory, and a request that shares the blocks
// of one still running. Scopes isolate tenants.
#include "cache/prefix_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "cache/small_block_model.h"
#include "engine/engine.h"
#include "model/deepseek_v4/model.h"
#include "test_util.h"

namespace strata::cache {
namespace {

namespace fs = std::filesystem;
using engine::CacheOptions;
using engine::Engine;
using engine::EngineConfig;
using engine::SamplingParams;
using engine::TokenEvent;

using test_models::small_block_model;

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  int64_t cached_tokens = -1;
};

SamplingParams sampled(int64_t max_tokens, bool greedy) {
  SamplingParams p;
  p.max_tokens = max_tokens;
  p.temperature = greedy ? 0.0 : 0.9;
  p.seed = 42;
  p.ignore_eos = true;
  p.logprobs = 3;
  return p;
}

std::map<std::string, Completion> run(Engine& e) {
  std::map<std::string, Completion> out;
  for (int guard = 0; e.has_unfinished() && guard < 100000; ++guard)
    for (const TokenEvent& ev : e.step()) {
      Completion& c = out[ev.request_id];
      if (!ev.token) continue;
      if (c.tokens.empty()) c.cached_tokens = ev.cached_tokens;
      c.tokens.push_back(*ev.token);
      c.logprobs.push_back(ev.logprob);
      c.top.push_back(ev.top_logprobs);
    }
  return out;
}

// Bit-for-bit: the same tokens, and logprobs whose float bits agree.
::testing::AssertionResult same(const Completion& a, const Completion& b) {
  if (a.tokens != b.tokens) return ::testing::AssertionFailure() << "tokens differ";
  if (!test::same_finite_bits(a.logprobs.data(), b.logprobs.data(), a.logprobs.size()))
    return ::testing::AssertionFailure() << "logprobs differ";
  for (size_t i = 0; i < a.top.size(); ++i) {
    if (a.top[i].size() != b.top[i].size()) return ::testing::AssertionFailure() << "top logprobs differ at " << i;
    for (size_t j = 0; j < a.top[i].size(); ++j)
      if (a.top[i][j].first != b.top[i][j].first ||
          !test::same_finite_bits(&a.top[i][j].second, &b.top[i][j].second, 1))
        return ::testing::AssertionFailure() << "top logprobs differ at " << i;
  }
  return ::testing::AssertionSuccess();
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::temp_dir("prefix_cache_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
  }
  std::shared_ptr<PrefixCache> make_cache(bool with_dir, int64_t every = 2) {
    CacheConfig c;
    c.store.dir = with_dir ? dir_ : "";
    c.store.writer_thread = true;
    c.checkpoint_every_blocks = every;
    return std::make_shared<PrefixCache>(small_block_model(), c);
  }
  static EngineConfig engine_config(std::shared_ptr<PrefixCache> cache, int64_t chunk = 2048) {
    EngineConfig c;
    c.pool = {8, 64};
    c.scheduler.max_num_batched_tokens = chunk;
    c.cache = std::move(cache);
    return c;
  }
  // One request on its own engine.
  static Completion complete(const std::vector<int32_t>& prompt, const SamplingParams& p,
                             std::shared_ptr<PrefixCache> cache, const CacheOptions& opts = {}) {
    Engine e(small_block_model(), engine_config(std::move(cache)));
    e.add_request("r", prompt, p, opts);
    return run(e)["r"];
  }
  std::string dir_;
};

TEST_F(PrefixCacheTest, AHitGivesTheColdTokensAndLogprobsAtEveryLengthAroundBlockBoundaries) {
  const int64_t B = small_block_model().state_layout().block_tokens;
  ASSERT_EQ(B, 16);
  auto cache = make_cache(false);
  const int64_t stride = test::kSanitized ? 3 : 1;
  for (int64_t len = 1; len <= 5 * B + 2; len += (len % B == 0 || len % B == B - 1 || len % B == 1) ? 1 : stride * 5) {
    for (bool greedy : {true, false}) {
      SCOPED_TRACE("prompt of " + std::to_string(len) + (greedy ? " greedy" : " sampled"));
      const std::vector<int32_t> prompt = test::token_ids(len, 7);
      const Completion cold = complete(prompt, sampled(6, greedy), nullptr);
      const Completion first = complete(prompt, sampled(6, greedy), cache);
      const Completion hit = complete(prompt, sampled(6, greedy), cache);
      EXPECT_TRUE(same(cold, first));
      EXPECT_TRUE(same(cold, hit));
      // The prompt's last block boundary short of its end was saved: a repeat resumes there.
      EXPECT_EQ(hit.cached_tokens, (len - 1) / B * B);
    }
  }
  const PrefixCacheStats st = cache->stats();
  EXPECT_GT(st.hits, 0);
  EXPECT_GT(st.hit_tokens[static_cast<size_t>(Tier::Host)], 0);
  EXPECT_EQ(st.restore_failures, 0);
}

TEST_F(PrefixCacheTest, AFollowUpTurnResumesWhereTheLastReplyEnded) {
  auto cache = make_cache(false);
  const std::vector<int32_t> turn1 = test::token_ids(37, 3);
  const Completion reply = complete(turn1, sampled(40, false), cache);
  // The next turn: the whole history plus a new message.
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), reply.tokens.begin(), reply.tokens.end());
  const std::vector<int32_t> more = test::token_ids(9, 4);
  turn2.insert(turn2.end(), more.begin(), more.end());
  const Completion cold = complete(turn2, sampled(8, false), nullptr);
  const Completion hit = complete(turn2, sampled(8, false), cache);
  EXPECT_TRUE(same(cold, hit));
  // Decode passed boundaries 48, 64; the history's 37 + 40 = 77 tokens were computed up to 76: the last boundary
  // decode reached is 64.
  EXPECT_EQ(hit.cached_tokens, 64);
}

TEST_F(PrefixCacheTest, ARestartedEngineHitsWhatTheLastOneSavedInItsDirectory) {
  const std::vector<int32_t> prompt = test::token_ids(70, 11);
  const Completion cold = complete(prompt, sampled(5, false), nullptr);
  {
    auto cache = make_cache(true);
    complete(prompt, sampled(5, false), cache);
    cache->store().flush();
  }
  auto restarted = make_cache(true);
  EXPECT_GT(restarted->stats().store.disk.entries, 0);
  const Completion hit = complete(prompt, sampled(5, false), restarted);
  EXPECT_EQ(hit.cached_tokens, 64);
  EXPECT_TRUE(same(cold, hit));
  EXPECT_EQ(restarted->stats().hit_tokens[static_cast<size_t>(Tier::Disk)], 64);
}

TEST_F(PrefixCacheTest, ARequestSharesTheBlocksOfARunningOneWithTheSamePrefix) {
  auto cache = make_cache(false, 2);
  const std::vector<int32_t> shared = test::token_ids(80, 21);
  std::vector<int32_t> a = shared, b = shared;
  for (int32_t t : test::token_ids(10, 22)) a.push_back(t);
  for (int32_t t : test::token_ids(12, 23)) b.push_back(t);
  const Completion cold_b = complete(b, sampled(6, false), nullptr);
  // Chunks of 32 tokens: a reaches its checkpoint at 32 in the first step and stays in the engine while b arrives.
  Engine e(small_block_model(), engine_config(cache, 32));
  e.add_request("a", a, sampled(6, false));
  for (int i = 0; i < 2; ++i) e.step();
  e.add_request("b", b, sampled(6, false));
  const auto out = run(e);
  EXPECT_TRUE(same(cold_b, out.at("b")));
  EXPECT_GE(out.at("b").cached_tokens, 32);
  EXPECT_GT(cache->stats().hit_tokens[static_cast<size_t>(Tier::Gpu)], 0) << "no block was shared from the pool";
  EXPECT_EQ(e.stats().used_blocks, 0);
}

TEST_F(PrefixCacheTest, ScopesIsolateTenantsAndCachingCanBeTurnedOffPerRequest) {
  auto cache = make_cache(false);
  const std::vector<int32_t> prompt = test::token_ids(50, 31);
  complete(prompt, sampled(3, true), cache, {true, "key:alice", 0});
  EXPECT_EQ(complete(prompt, sampled(3, true), cache, {true, "key:bob", 0}).cached_tokens, 0);
  EXPECT_EQ(complete(prompt, sampled(3, true), cache, {true, "", 0}).cached_tokens, 0);
  EXPECT_EQ(complete(prompt, sampled(3, true), cache, {false, "key:alice", 0}).cached_tokens, 0);
  EXPECT_EQ(complete(prompt, sampled(3, true), cache, {true, "key:alice", 0}).cached_tokens, 48);
}

TEST_F(PrefixCacheTest, AMissingBlockOrDamagedRowsFallBackToComputing) {
  auto cache = make_cache(true);
  const std::vector<int32_t> prompt = test::token_ids(60, 41);
  const Completion cold = complete(prompt, sampled(4, false), nullptr);
  complete(prompt, sampled(4, false), cache);
  cache->store().flush();
  // Damage every rows file on disk, then read through a cache with no host memory.
  for (const auto& f : fs::recursive_directory_iterator(cache->store().model_dir()))
    if (f.is_regular_file() && f.path().filename().string()[0] == 'r') {
      std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
      s.seekp(static_cast<std::streamoff>(kEntryHeaderBytes) + 20);
      s.put('\x7f');
    }
  CacheConfig c;
  c.store.dir = dir_;
  c.store.host_bytes = 0;
  c.checkpoint_every_blocks = 2;
  auto cold_cache = std::make_shared<PrefixCache>(small_block_model(), c);
  const Completion again = complete(prompt, sampled(4, false), cold_cache);
  EXPECT_TRUE(same(cold, again));
  EXPECT_EQ(again.cached_tokens, 0);
  EXPECT_GT(cold_cache->stats().store.corrupt_files, 0);
}

// A prefix several requests share (a system prompt) that ends mid-block is checkpointed where it ends once a
// second request has seen it, so the third resumes there — DeepSeek's "common prefixes seen more than once".
TEST_F(PrefixCacheTest, APrefixSeenBeforeIsCheckpointedWhereItEnds) {
  auto cache = make_cache(false, 64);  // no checkpoints every N blocks here
  const std::vector<int32_t> system = test::token_ids(50, 81);  // blocks 0–2 and 2 tokens of block 3
  auto with_tail = [&](int64_t salt) {
    std::vector<int32_t> p = system;
    for (int32_t t : test::token_ids(20, salt)) p.push_back(t);
    return p;
  };
  EXPECT_EQ(complete(with_tail(82), sampled(3, true), cache).cached_tokens, 0);
  // The first request saved its blocks and the rows at its own last boundary (64), past the shared part: a miss,
  // which finds 3 of its blocks cached and checkpoints their end.
  EXPECT_EQ(complete(with_tail(83), sampled(3, true), cache).cached_tokens, 0);
  const std::vector<int32_t> third = with_tail(84);
  const Completion hit = complete(third, sampled(3, true), cache);
  EXPECT_EQ(hit.cached_tokens, 48);
  EXPECT_TRUE(same(complete(third, sampled(3, true), nullptr), hit));
}

// The GPU tier outlives its sequences: a finished request's full blocks stay in the state pool, findable, until new
// blocks need their room; a repeat shares them without any copy (only its boundary rows come from host memory).
TEST_F(PrefixCacheTest, AFinishedRequestsBlocksStayInThePoolForTheNextOneUntilTheirRoomIsNeeded) {
  CacheConfig c;
  c.checkpoint_every_blocks = 64;
  auto cache = std::make_shared<PrefixCache>(small_block_model(), c);
  const std::vector<int32_t> prompt = test::token_ids(70, 61);
  const Completion cold = complete(prompt, sampled(4, false), nullptr);
  Engine e(small_block_model(), engine_config(cache));
  e.add_request("first", prompt, sampled(4, false));
  run(e);
  EXPECT_EQ(e.stats().used_blocks, 0);
  EXPECT_EQ(e.stats().kept_blocks, 4);  // 74 tokens computed: 4 full blocks of 16
  e.add_request("again", prompt, sampled(4, false));
  const Completion again = run(e)["again"];
  EXPECT_TRUE(same(cold, again));
  EXPECT_EQ(again.cached_tokens, 64);
  EXPECT_EQ(cache->stats().hit_tokens[static_cast<size_t>(Tier::Gpu)], 64);
  EXPECT_EQ(cache->stats().hit_tokens[static_cast<size_t>(Tier::Host)], 0);
  // A prompt that needs almost the whole pool (63 of 64 blocks) takes the kept blocks' room.
  e.add_request("big", test::token_ids(16 * 62, 70), sampled(1, true));
  run(e);
  EXPECT_GT(e.stats().evicted_kept_blocks, 0);
  const int64_t host_hits = cache->stats().hit_tokens[static_cast<size_t>(Tier::Host)];
  e.add_request("late", prompt, sampled(4, false));
  const Completion late = run(e)["late"];
  EXPECT_TRUE(same(cold, late));
  EXPECT_EQ(late.cached_tokens, 64);
  // The least recently released blocks went first: the prefix's first blocks come from host memory now.
  EXPECT_GT(cache->stats().hit_tokens[static_cast<size_t>(Tier::Host)], host_hits);
}

// Replay mode (DeepSeek's bounded replay): checkpoints keep token blocks only; a hit restores them and replays the
// prefix's last replay_tokens tokens, in whatever chunks the scheduler cuts. The modes never share entries.
TEST_F(PrefixCacheTest, ReplayModeKeepsBlocksOnlyAndReplaysTheLastTokensOfAHit) {
  CacheConfig c;
  c.store.dir = dir_;
  c.mode = ReuseMode::Replay;
  c.replay_tokens = 20;
  c.checkpoint_every_blocks = 2;
  auto cache = std::make_shared<PrefixCache>(small_block_model(), c);
  const std::vector<int32_t> prompt = test::token_ids(70, 51);
  const Completion cold = complete(prompt, sampled(5, true), nullptr);
  EXPECT_TRUE(same(cold, complete(prompt, sampled(5, true), cache)));  // a miss computes everything
  const Completion hit = complete(prompt, sampled(5, true), cache);
  EXPECT_EQ(hit.cached_tokens, 64 - 20);  // 4 blocks found; their last 20 tokens replayed
  ASSERT_EQ(hit.tokens.size(), cold.tokens.size());
  for (float lp : hit.logprobs) EXPECT_TRUE(std::isfinite(lp));
  // The same hit prefilled 8 tokens a step: the replay does not depend on the chunking.
  Engine chunked(small_block_model(), engine_config(cache, 8));
  chunked.add_request("r", prompt, sampled(5, true));
  EXPECT_TRUE(same(hit, run(chunked)["r"]));
  const PrefixCacheStats st = cache->stats();
  EXPECT_EQ(st.saved_rows, 0);
  EXPECT_GT(st.saved_blocks, 0);
  EXPECT_EQ(st.restore_failures, 0);
  cache->store().flush();
  for (const auto& f : fs::recursive_directory_iterator(cache->store().model_dir()))
    if (f.is_regular_file()) {
      EXPECT_NE(f.path().filename().string()[0], 'r') << f.path();
    }
  // An exact-mode cache over the same directory finds nothing of replay mode's.
  auto exact = make_cache(true);
  EXPECT_EQ(complete(prompt, sampled(5, true), exact).cached_tokens, 0);
  // A prefix no longer than the replay is a miss; fewer replayed tokens than the window is a configuration error.
  EXPECT_EQ(complete(test::token_ids(17, 52), sampled(2, true), cache).cached_tokens, 0);
  c.replay_tokens = 15;
  EXPECT_NE(test::error_of([&] { PrefixCache bad(small_block_model(), c); }).find("fewer than the model's sliding window"),
            std::string::npos);
}

// The embedded demo model (models/demo/, trained weights, blocks of 128 tokens): a hit at a prompt that crosses two
// block boundaries gives the cold tokens and logprobs. (Not under the sanitizers: its 129k-token vocabulary makes
// every step slow there, and the random models above run the same code.)
TEST_F(PrefixCacheTest, TheDemoModelResumesExactly) {
  if (test::kSanitized) GTEST_SKIP() << "slow under the sanitizers; the random models cover the same code";
  const fs::path dir = (fs::path(STRATA_FIXTURES) / ".." / ".." / "models" / "demo").lexically_normal();
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "no models/demo/ in this checkout";
  const model::v4::Model demo = model::v4::load_model(dir.string());
  CacheConfig c;
  auto cache = std::make_shared<PrefixCache>(demo, c);
  auto complete_on = [&](const std::vector<int32_t>& prompt, std::shared_ptr<PrefixCache> with) {
    EngineConfig ec = engine_config(std::move(with));
    Engine e(demo, ec);
    e.add_request("r", prompt, sampled(4, false));
    return run(e)["r"];
  };
  for (const int64_t len : {int64_t{300}}) {
    std::vector<int32_t> prompt = test::token_ids(len, 9);
    for (int32_t& t : prompt) t += 1000;
    const Completion cold = complete_on(prompt, nullptr);
    complete_on(prompt, cache);
    const Completion hit = complete_on(prompt, cache);
    EXPECT_EQ(hit.cached_tokens, (len - 1) / 128 * 128);
    EXPECT_TRUE(same(cold, hit)) << len;
  }
}

}  // namespace
}  // namespace strata::cache
