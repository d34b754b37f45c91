// Speculative decoding with the MTP layer (docs/mtp.md, "Speculative decoding in the engine"): greedy output
// identical to decoding without it, whatever the draft length, batch, chunking and preemption; exact rejection
// sampling (a statistical check that fails for the wrong rule); the planner; truncation inside accepted drafts;
// honest accounting; bad settings named.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>

#include "backend/cpu/sampling.h"
#include "cache/prefix_cache.h"
#include "core/error.h"
#include "engine/draft_planner.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/speculative_sampling.h"
#include "model/deepseek_v4/draft_vocabulary.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "engine/letter_vocabulary.h"
#include "text/grammar/compiled_grammar.h"
#include "test_util.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

using model::v4::Model;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---- the acceptance rule ---------------------------------------------------------------------------------------

TEST(SpeculativeSampling, PickDistributionIsWhatPickTokenDraws) {
  std::vector<float> logits(40);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(1.7 * static_cast<double>(i)) * 3.0);
  logits[7] = logits[9];  // a tie, broken by id in both
  for (const model::TokenPick& pick : {model::TokenPick{0.8, 0, 1.0, 0.0, 0}, model::TokenPick{1.2, 5, 1.0, 0.0, 0},
                                       model::TokenPick{1.0, 0, 0.7, 0.0, 0}, model::TokenPick{0.6, 12, 0.9, 0.05, 0}}) {
    const std::vector<float> p = pick_distribution(logits, pick);
    EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-5);
    std::vector<double> seen(logits.size(), 0);
    const int draws = 40000;
    for (int i = 0; i < draws; ++i) {
      model::TokenPick u = pick;
      u.uniform = counter_uniform(99, static_cast<uint64_t>(i));
      seen[static_cast<size_t>(cpu::pick_token(logits, u))] += 1.0 / draws;
    }
    for (size_t id = 0; id < logits.size(); ++id) {
      if (p[id] == 0) {
        EXPECT_EQ(seen[id], 0) << "token " << id << " outside the kept set was drawn";
      }
      EXPECT_NEAR(seen[id], p[id], 0.012) << "token " << id << " top_k " << pick.top_k << " top_p " << pick.top_p;
    }
  }
  const std::vector<float> greedy = pick_distribution(logits, {});
  EXPECT_EQ(greedy[static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())], 1.0f);
}

// Drafts drawn from q, verified against p: the tokens that come out are distributed as p. The tolerance (0.006 on
// each probability, 400k draws: ~8 standard deviations) is far below what always accepting the draft (which gives
// q) or accepting with probability min(1, q/p) would show, both checked to fail it.
TEST(SpeculativeSampling, RejectionSamplingPreservesTheTargetDistribution) {
  const std::vector<float> p = {0.40f, 0.05f, 0.25f, 0.0f, 0.20f, 0.10f};
  const std::vector<float> q = {0.10f, 0.30f, 0.20f, 0.15f, 0.05f, 0.20f};
  const int draws = 400000;
  std::vector<double> out(p.size(), 0), always(p.size(), 0), inverted(p.size(), 0);
  for (int i = 0; i < draws; ++i) {
    const auto n = static_cast<uint64_t>(i);
    const int32_t d = draw_from(q, counter_uniform(1, n));
    const double ua = counter_uniform(2, n), ur = counter_uniform(3, n);
    const DraftVerdict v = verify_draft(p, q, d, ua, ur);
    EXPECT_EQ(v.accepted, v.token == d && ua * q[static_cast<size_t>(d)] < p[static_cast<size_t>(d)]);
    out[static_cast<size_t>(v.token)] += 1.0 / draws;
    always[static_cast<size_t>(d)] += 1.0 / draws;
    // The wrong ratio: accept with min(1, q/p).
    const DraftVerdict w = verify_draft(q, p, d, ua, ur);
    inverted[static_cast<size_t>(w.token)] += 1.0 / draws;
  }
  double worst = 0, worst_always = 0, worst_inverted = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    worst = std::max(worst, std::abs(out[i] - p[i]));
    worst_always = std::max(worst_always, std::abs(always[i] - p[i]));
    worst_inverted = std::max(worst_inverted, std::abs(inverted[i] - p[i]));
  }
  EXPECT_LT(worst, 0.006);
  EXPECT_GT(worst_always, 0.05);
  EXPECT_GT(worst_inverted, 0.05);
  EXPECT_EQ(out[3], 0);  // p(3) = 0: never emitted, though q drafts it
}

TEST(SpeculativeSampling, PointMassDraftsAndBadInputs) {
  const std::vector<float> p = {0.5f, 0.5f}, delta = {0.0f, 1.0f};
  EXPECT_TRUE(verify_draft(p, delta, 1, 0.49, 0.0).accepted);
  const DraftVerdict r = verify_draft(p, delta, 1, 0.51, 0.3);
  EXPECT_FALSE(r.accepted);
  EXPECT_EQ(r.token, 0);  // the residual max(0, p − δ) is all on token 0
  EXPECT_NE(error_of([&] { verify_draft(p, delta, 2, 0, 0); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(error_of([&] { verify_draft(p, std::vector<float>{1.0f}, 0, 0, 0); }).find("differ in size"), std::string::npos);
}

// ---- the planner ------------------------------------------------------------------------------------------------

TEST(DraftPlanner, TakesConfidentPrefixesWhileTheyPayForTheirRows) {
  // One sequence, fixed cost 8 rows: 0.5 raises 1/9, 0.25 raises 1.5/10, 0.125 does not raise 1.75/11.
  EXPECT_EQ(plan_drafts({{0.5f, 0.5f, 0.5f}}, 1, 1, 8.0), (std::vector<int64_t>{2}));
  // Certain drafts are always worth a row; hopeless ones never.
  EXPECT_EQ(plan_drafts({{1.0f, 1.0f, 1.0f}, {0.01f, 0.9f}}, 2, 2, 8.0), (std::vector<int64_t>{3, 0}));
  // With no fixed cost, a row pays only if it is accepted more often than the step's tokens per row (1).
  EXPECT_EQ(plan_drafts({{0.9f}}, 1, 1, 0.0), (std::vector<int64_t>{0}));
  EXPECT_EQ(plan_drafts({}, 3, 3, 8.0), (std::vector<int64_t>{}));
}

// ---- the engine -------------------------------------------------------------------------------------------------

model::ModelConfig tiny_mtp_config() {
  model::ModelConfig c = model::v4::preset_config("tiny");
  c.num_nextn_predict_layers = 1;
  return c;
}

class SpeculativeEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = test::temp_dir("speculative_engine");
    model::v4::write_random_checkpoint(tiny_mtp_config(), dir, 21, DType::F32);
    model_ = new Model(model::v4::load_model(dir, model::Device::Cpu, model::Precision::Bf16, {}, 5));
  }
  static void TearDownTestSuite() { delete model_; }

  static EngineConfig config(int64_t tokens, int64_t budget = 64, int64_t blocks = 64, int64_t seqs = 8) {
    EngineConfig c;
    c.scheduler.max_num_batched_tokens = budget;
    c.scheduler.max_num_seqs = seqs;
    c.pool.max_sequences = seqs;
    c.pool.blocks = blocks;
    c.speculative.tokens = tokens;
    // A random MTP head is never confident: draft anyway, and verify every draft (a step cost of infinitely many
    // rows makes any draft worth its row), so verification runs.
    c.speculative.min_prob = 0.0;
    c.speculative.step_cost_rows = std::numeric_limits<double>::infinity();
    return c;
  }

  static std::vector<int32_t> prompt_of(int q, int64_t len) {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((i * 37 + q * 101 + 2) % 510 + 2));
    return p;
  }

  struct Run {
    std::map<std::string, std::vector<int32_t>> tokens;
    std::map<std::string, std::vector<float>> logprobs;
    std::map<std::string, FinishReason> why;
    std::map<std::string, SpeculativeCounts> counts;
    std::map<std::string, int64_t> drafted_events;
    EngineStats stats;
  };
  static Run run(Engine& e) {
    Run r;
    for (int guard = 0; e.has_unfinished() && guard < 20000; ++guard)
      for (const TokenEvent& ev : e.step()) {
        const std::string key = ev.request_id + "/" + std::to_string(ev.index);
        if (ev.token) {
          r.tokens[key].push_back(*ev.token);
          r.logprobs[key].push_back(ev.logprob);
        }
        r.drafted_events[key] += ev.drafted;
        if (ev.finished) {
          r.why[key] = ev.reason;
          if (ev.speculative) r.counts[key] = *ev.speculative;
        }
      }
    r.stats = e.stats();
    return r;
  }

  // Requests of different prompt lengths (one longer than the window, one across a token block), greedy.
  static void add_batch(Engine& e, const SamplingParams& base) {
    const std::vector<int64_t> lengths = {5, 140, 33, 1, 260, 129};
    for (size_t q = 0; q < lengths.size(); ++q) {
      SamplingParams p = base;
      p.seed = 500 + q;
      e.add_request("r" + std::to_string(q), prompt_of(static_cast<int>(q), lengths[q]), p);
    }
  }

  // (output token 1, output token 2) over `seeds` requests of one prompt, seeds seed0, seed0 + 1, …
  static std::pair<std::map<std::pair<int32_t, int32_t>, double>, SpeculativeCounts> pair_histogram(
      const EngineConfig& c, const SamplingParams& p, int seeds, uint64_t seed0, const std::vector<int32_t>& prompt) {
    Engine e(*model_, c);
    for (int i = 0; i < seeds; ++i) {
      SamplingParams q = p;
      q.seed = seed0 + static_cast<uint64_t>(i);
      e.add_request("s" + std::to_string(i), prompt, q);
    }
    const Run r = run(e);
    std::map<std::pair<int32_t, int32_t>, double> h;
    for (const auto& [key, t] : r.tokens) h[{t.at(1), t.at(2)}] += 1.0 / seeds;
    return {h, r.stats.speculative};
  }

  static Model* model_;
};
Model* SpeculativeEngine::model_ = nullptr;

SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 2;
  return p;
}

// Every accepted or rejected draft is counted where it happened; the engine's totals are the requests' sums.
void expect_consistent(const SpeculativeCounts& c, const std::string& key) {
  EXPECT_EQ(c.emitted + c.truncated, c.accepted + c.verify_steps) << key;
  EXPECT_LE(c.accepted, c.verified) << key;
  EXPECT_LE(c.verified, c.drafted) << key;
  EXPECT_EQ(std::accumulate(c.verified_at.begin(), c.verified_at.end(), int64_t{0}), c.verified) << key;
  EXPECT_EQ(std::accumulate(c.accepted_at.begin(), c.accepted_at.end(), int64_t{0}), c.accepted) << key;
}

TEST_F(SpeculativeEngine, GreedyOutputIsIdenticalWithTheMtpLayersDrafts) {
  Engine plain(*model_, config(0));
  add_batch(plain, greedy(20));
  const Run expected = run(plain);
  for (int64_t n = 1; n <= 5; ++n) {
    Engine e(*model_, config(n));
    add_batch(e, greedy(20));
    const Run got = run(e);
    EXPECT_EQ(got.tokens, expected.tokens) << "speculative tokens " << n;
    EXPECT_EQ(got.logprobs, expected.logprobs) << "speculative tokens " << n;
    EXPECT_GT(got.stats.speculative.verified, 0) << n;
    SpeculativeCounts sum;
    for (const auto& [key, c] : got.counts) {
      expect_consistent(c, key);
      EXPECT_EQ(got.drafted_events.at(key), c.accepted) << key;  // nothing is cut here
      sum += c;
    }
    expect_consistent(got.stats.speculative, "engine");
    EXPECT_EQ(sum.verified, got.stats.speculative.verified);
    EXPECT_EQ(sum.accepted, got.stats.speculative.accepted);
    EXPECT_EQ(sum.drafted, got.stats.speculative.drafted);
    EXPECT_EQ(got.stats.used_blocks + got.stats.used_slots, 0);
  }
}

// The target's own continuation as the drafts (a test hook), spoiled at every fifth position: drafts are accepted
// often, rejected sometimes in mid-chain, and the output is still the plain greedy one.
TEST_F(SpeculativeEngine, GreedyOutputIsIdenticalWhenDraftsAreMostlyRight) {
  Engine plain(*model_, config(0));
  add_batch(plain, greedy(24));
  const Run expected = run(plain);
  for (int64_t n : {1, 3, 5}) {
    EngineConfig c = config(n);
    c.speculative.test_draft = [&](const Sequence& s, std::span<const int32_t> so_far) -> std::optional<int32_t> {
      const std::vector<int32_t>& truth = expected.tokens.at(s.request_id + "/0");
      const size_t at = s.output.size() + so_far.size();
      if (at >= truth.size()) return std::nullopt;
      return at % 5 == 3 ? (truth[at] + 1) % 512 : truth[at];
    };
    Engine e(*model_, c);
    add_batch(e, greedy(24));
    const Run got = run(e);
    EXPECT_EQ(got.tokens, expected.tokens) << n;
    EXPECT_EQ(got.logprobs, expected.logprobs) << n;
    const SpeculativeCounts& t = got.stats.speculative;
    expect_consistent(t, "engine");
    EXPECT_GT(t.accepted, t.verified / 2) << n;
    EXPECT_LT(t.accepted, t.verified) << n;  // the spoiled positions are rejected
    if (n > 1) {
      EXPECT_GT(t.accepted_at.at(1), 0) << n;
    }
  }
}

// The catch-up over every verified row (SpeculativeConfig::catch_up_all_rows, for a fixed step shape) drafts what
// the catch-up over the kept rows does: the spare rows' outputs are unused and their MTP-ring positions dropped.
// A random MTP head's drafts are rejected at once, so most catch-ups carry spare rows; every draft chain's drafts
// (seen by the test hook, which keeps the MTP layer's own) and every count match.
TEST_F(SpeculativeEngine, ACatchUpOverEveryVerifiedRowDraftsWhatTheKeptRowsDo) {
  for (int64_t n : {1, 3, 5}) {
    std::map<bool, std::vector<std::vector<int32_t>>> chains;
    std::map<bool, Run> runs;
    for (bool all_rows : {false, true}) {
      EngineConfig c = config(n);
      c.speculative.catch_up_all_rows = all_rows;
      c.speculative.test_draft = [&chains, all_rows](const Sequence& s, std::span<const int32_t> so_far) {
        std::vector<int32_t> key{static_cast<int32_t>(s.request_id.size()), static_cast<int32_t>(s.output.size())};
        key.insert(key.end(), s.request_id.begin(), s.request_id.end());
        key.insert(key.end(), so_far.begin(), so_far.end());
        chains[all_rows].push_back(std::move(key));
        return std::optional<int32_t>{};
      };
      Engine e(*model_, c);
      add_batch(e, greedy(20));
      runs[all_rows] = run(e);
    }
    std::sort(chains[false].begin(), chains[false].end());
    std::sort(chains[true].begin(), chains[true].end());
    EXPECT_EQ(chains[true], chains[false]) << n;
    EXPECT_GT(chains[true].size(), 50u) << n;
    EXPECT_EQ(runs[true].tokens, runs[false].tokens) << n;
    const SpeculativeCounts &a = runs[true].stats.speculative, &b = runs[false].stats.speculative;
    EXPECT_EQ(a.drafted, b.drafted) << n;
    EXPECT_EQ(a.verified_at, b.verified_at) << n;
    EXPECT_EQ(a.accepted_at, b.accepted_at) << n;
    EXPECT_LT(a.accepted, a.verified) << n;  // rejections: spare rows were run
    EXPECT_EQ(runs[true].stats.used_blocks + runs[true].stats.used_slots, 0);
  }
}

// With the prefix cache, a decode's rows are staged when a step ends exactly on a block boundary; verify steps
// advance by 1 + accepted drafts, so the drafts stop at the next boundary (Engine::collect_streams) and a follow-up
// turn resumes at the last boundary the reply reached, as without speculation. The prompt (101 tokens) is chosen
// so that steps of 4 (3 drafts, all accepted) would step over the boundary at 128.
TEST_F(SpeculativeEngine, VerifyStepsStopAtBlockBoundariesSoTheCacheStagesThem) {
  const int64_t B = model_->state_layout().block_tokens;
  ASSERT_EQ(B, 128);
  const std::vector<int32_t> prompt = prompt_of(2, 101);
  Engine plain(*model_, config(0));
  plain.add_request("a", prompt, greedy(60));
  const Run expected = run(plain);
  const std::vector<int32_t>& reply = expected.tokens.at("a/0");
  ASSERT_EQ(reply.size(), 60u);
  std::vector<int32_t> follow_up = prompt;
  follow_up.insert(follow_up.end(), reply.begin(), reply.end());
  for (int32_t t : {7, 9, 11}) follow_up.push_back(t);

  cache::CacheConfig cc;
  cc.store.writer_thread = false;
  auto shared = std::make_shared<cache::PrefixCache>(*model_, cc);
  EngineConfig c = config(3);
  c.cache = shared;
  c.speculative.test_draft = [&](const Sequence& seq, std::span<const int32_t> so_far) -> std::optional<int32_t> {
    const size_t at = seq.output.size() + so_far.size();
    return at < reply.size() ? std::optional<int32_t>(reply[at]) : std::nullopt;
  };
  Engine e(*model_, c);
  e.add_request("a", prompt, greedy(60));
  const Run got = run(e);
  EXPECT_EQ(got.tokens, expected.tokens);
  EXPECT_GT(got.stats.speculative.accepted, 30);  // most steps took 3 drafts
  // The follow-up on the same cache resumes at 128, the last boundary the 101 + 60 − 1 computed tokens reached.
  int64_t cached = -1;
  e.add_request("b", follow_up, greedy(4));
  for (int guard = 0; e.has_unfinished() && guard < 20000; ++guard)
    for (const TokenEvent& ev : e.step())
      if (ev.request_id == "b" && ev.token && cached < 0) cached = ev.cached_tokens;
  EXPECT_EQ(cached, 128);
  {
    auto plain_cache = std::make_shared<cache::PrefixCache>(*model_, cc);
    EngineConfig pc = config(0);
    pc.cache = plain_cache;
    Engine pe(*model_, pc);
    pe.add_request("a", prompt, greedy(60));
    run(pe);
    int64_t pcached = -1;
    pe.add_request("b", follow_up, greedy(4));
    for (int guard = 0; pe.has_unfinished() && guard < 20000; ++guard)
      for (const TokenEvent& ev : pe.step())
        if (ev.request_id == "b" && ev.token && pcached < 0) pcached = ev.cached_tokens;
    EXPECT_EQ(pcached, 128) << "without speculation";
  }
}

TEST_F(SpeculativeEngine, PreemptionAndChunkedPrefillKeepGreedyOutputIdentical) {
  // Four sequences of 150 + 24 tokens need two blocks each; five blocks cannot hold them all: the newest get
  // preempted and recomputed, their drafts dropped with their state. Prefill in chunks of 64 tokens.
  const auto add = [](Engine& e) {
    for (int q = 0; q < 4; ++q) e.add_request("p" + std::to_string(q), prompt_of(q, 150), greedy(24));
  };
  Engine plain(*model_, config(0, 64, 5, 4));
  add(plain);
  const Run expected = run(plain);
  Engine e(*model_, config(4, 64, 5, 4));
  add(e);
  const Run got = run(e);
  EXPECT_EQ(got.tokens, expected.tokens);
  EXPECT_GT(got.stats.preemptions, 0);
  EXPECT_GT(got.stats.speculative.verified, 0);
  EXPECT_EQ(got.stats.used_blocks, 0);
}

TEST_F(SpeculativeEngine, AStopIdOrMaxTokensInsideAcceptedDraftsEndsTheOutputThere) {
  Engine plain(*model_, config(0));
  SamplingParams p = greedy(30);
  plain.add_request("a", prompt_of(3, 40), p);
  const std::vector<int32_t> truth = run(plain).tokens.at("a/0");
  ASSERT_EQ(truth.size(), 30u);
  // Stop at the token at output position 13 (its first occurrence), drafted with everything around it right.
  const auto first = static_cast<size_t>(std::find(truth.begin(), truth.end(), truth[13]) - truth.begin());
  EngineConfig c = config(5);
  c.speculative.test_draft = [&](const Sequence& s, std::span<const int32_t> so_far) -> std::optional<int32_t> {
    const size_t at = s.output.size() + so_far.size();
    return at < truth.size() ? std::optional<int32_t>(truth[at]) : std::nullopt;
  };
  {
    Engine e(*model_, c);
    SamplingParams stop = p;
    stop.stop_token_ids = {truth[13]};
    e.add_request("a", prompt_of(3, 40), stop);
    const Run got = run(e);
    EXPECT_EQ(got.tokens.at("a/0"), std::vector<int32_t>(truth.begin(), truth.begin() + static_cast<long>(first) + 1));
    EXPECT_EQ(got.why.at("a/0"), FinishReason::Stop);
    const SpeculativeCounts& k = got.counts.at("a/0");
    expect_consistent(k, "stop");
    EXPECT_EQ(k.accepted, k.verified);  // every draft right
    EXPECT_EQ(got.stats.generated_tokens, static_cast<int64_t>(first) + 1);
  }
  {
    // max_tokens: drafts are never planned past it, so nothing is cut, and the output ends exactly there.
    Engine e(*model_, c);
    SamplingParams shorter = p;
    shorter.max_tokens = 17;
    e.add_request("a", prompt_of(3, 40), shorter);
    const Run got = run(e);
    EXPECT_EQ(got.tokens.at("a/0"), std::vector<int32_t>(truth.begin(), truth.begin() + 17));
    EXPECT_EQ(got.why.at("a/0"), FinishReason::Length);
    expect_consistent(got.counts.at("a/0"), "length");
  }
}

TEST_F(SpeculativeEngine, SampledOutputIsSeededAndCounted) {
  SamplingParams p;
  p.temperature = 0.9;
  p.top_k = 40;
  p.repetition_penalty = 1.3;
  p.max_tokens = 20;
  p.ignore_eos = true;
  auto once = [&](int64_t n) {
    Engine e(*model_, config(n));
    add_batch(e, p);
    return run(e);
  };
  const Run a = once(3), b = once(3);
  EXPECT_EQ(a.tokens, b.tokens);  // a function of the seeds
  for (const auto& [key, t] : a.tokens) EXPECT_EQ(t.size(), 20u) << key;
  expect_consistent(a.stats.speculative, "sampled");
  EXPECT_GT(a.stats.speculative.verified, 0);
}

// Histograms of (output token 1, output token 2) over many seeds, for the distribution checks below.
using PairHistogram = std::map<std::pair<int32_t, int32_t>, double>;

double total_variation(const PairHistogram& a, const PairHistogram& b) {
  std::map<std::pair<int32_t, int32_t>, int> keys;
  for (const auto& [k, f] : a) keys[k] = 1;
  for (const auto& [k, f] : b) keys[k] = 1;
  double tv = 0;
  for (const auto& [k, one] : keys) {
    const auto x = a.find(k), y = b.find(k);
    tv += std::abs((x == a.end() ? 0 : x->second) - (y == b.end() ? 0 : y->second)) / 2;
  }
  return tv;
}

std::map<int32_t, double> first_tokens(const PairHistogram& h) {
  std::map<int32_t, double> first;
  for (const auto& [pair, f] : h) first[pair.first] += f;
  return first;
}

int32_t most_frequent(const std::map<int32_t, double>& m) {
  return std::max_element(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
}

// At temperature > 0 the engine's output is distributed as without speculation: many seeds of one prompt, the pairs
// (output token 1, output token 2) counted with speculation off and on. With max_tokens 3 each sequence verifies one
// draft, for token 1, with token 2 its bonus or the token after a rejection; the draft is forced (the test hook) to
// the plain run's most frequent token 1, so some are accepted and some rejected (the residual draw). Total
// variation between the two histograms must stay under 0.08 with 1,600 seeds a side (a few standard deviations of
// the sampling noise); emitting the forced draft whenever it is verified would move token 1's histogram onto one
// token (a total variation near 0.5 here, checked below from the plain counts).
TEST_F(SpeculativeEngine, RejectionSampledTokensAreDistributedAsWithoutSpeculation) {
  const int seeds = test::kSanitized ? 400 : 1600;
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 3;
  p.max_tokens = 3;
  p.ignore_eos = true;
  const auto histogram = [&](EngineConfig c) { return pair_histogram(c, p, seeds, 7000, prompt_of(1, 12)); };
  const auto [plain, plain_counts] = histogram(config(0, 256, 256, 64));
  // The most frequent token 1 of the plain run.
  const std::map<int32_t, double> first = first_tokens(plain);
  const int32_t d1 = most_frequent(first);
  EngineConfig c = config(2, 256, 256, 64);
  c.speculative.verify = SpeculativeConfig::Verify::Rejection;
  c.speculative.test_draft = [&](const Sequence& s, std::span<const int32_t> so_far) -> std::optional<int32_t> {
    const size_t at = s.output.size() + so_far.size();
    return at == 1 ? std::optional<int32_t>(d1) : std::nullopt;
  };
  const auto [spec, counts] = histogram(c);
  const double tv = total_variation(plain, spec);
  EXPECT_LT(tv, test::kSanitized ? 0.16 : 0.08) << "plain vs speculative histograms of (token 1, token 2)";
  EXPECT_GT(1.0 - first.at(d1), 0.2) << "the forced draft is too likely for the check to discriminate";
  EXPECT_EQ(plain_counts.verified, 0);
  EXPECT_EQ(counts.verified, seeds);  // token 1's draft, for every seed
  EXPECT_GT(counts.accepted, counts.verified / 5);
  EXPECT_LT(counts.accepted, counts.verified);  // rejections: the residual draw ran
}

// Verify::Match (the default): a sampled row keeps its draft when the draft is its own draw, so sampled output is
// the plain run's bit for bit — tokens and logprobs, with penalties, top-k/top-p and several seeds — whatever the
// draft length; with the target's continuation as drafts (spoiled every fifth position) many are accepted. And it
// is batch invariant with speculation on: each request alone gives what it gives in the batch.
TEST_F(SpeculativeEngine, MatchVerifiedSampledOutputIsThePlainRunsBitForBit) {
  SamplingParams p;
  p.temperature = 0.9;
  p.top_k = 40;
  p.top_p = 0.95;
  p.repetition_penalty = 1.2;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.logprobs = 2;
  Engine plain(*model_, config(0));
  add_batch(plain, p);
  const Run expected = run(plain);
  for (int64_t n : {1, 3, 5}) {
    Engine e(*model_, config(n));
    add_batch(e, p);
    const Run got = run(e);
    EXPECT_EQ(got.tokens, expected.tokens) << n;
    EXPECT_EQ(got.logprobs, expected.logprobs) << n;
    EXPECT_GT(got.stats.speculative.verified, 0) << n;
  }
  EngineConfig c = config(3);
  c.speculative.test_draft = [&](const Sequence& s, std::span<const int32_t> so_far) -> std::optional<int32_t> {
    const std::vector<int32_t>& truth = expected.tokens.at(s.request_id + "/0");
    const size_t at = s.output.size() + so_far.size();
    if (at >= truth.size()) return std::nullopt;
    return at % 5 == 3 ? (truth[at] + 1) % 512 : truth[at];
  };
  Engine e(*model_, c);
  add_batch(e, p);
  const Run got = run(e);
  EXPECT_EQ(got.tokens, expected.tokens);
  EXPECT_EQ(got.logprobs, expected.logprobs);
  const SpeculativeCounts& t = got.stats.speculative;
  expect_consistent(t, "match");
  EXPECT_GT(t.accepted, t.verified / 2);
  EXPECT_LT(t.accepted, t.verified);
  // Alone, each request gives its batched output (the planner's k differs with the batch; the output does not).
  const std::vector<int64_t> lengths = {5, 140, 33, 1, 260, 129};
  for (size_t q = 0; q < lengths.size(); ++q) {
    Engine solo(*model_, config(3));
    SamplingParams one = p;
    one.seed = 500 + q;
    const std::string id = "r" + std::to_string(q);
    solo.add_request(id, prompt_of(static_cast<int>(q), lengths[q]), one);
    const Run alone = run(solo);
    EXPECT_EQ(alone.tokens.at(id + "/0"), expected.tokens.at(id + "/0")) << id;
    EXPECT_EQ(alone.logprobs.at(id + "/0"), expected.logprobs.at(id + "/0")) << id;
  }
}

// ---- structured outputs: drafts under a grammar ------------------------------------------------------------------

// A grammar over the tiny vocabulary's letters (ids 2-27).
std::shared_ptr<const OutputConstraint> letters_constraint(int64_t vocab, const std::string& ebnf) {
  auto c = std::make_shared<OutputConstraint>();
  c->grammar = text::grammar::CompiledGrammar::from_ebnf(ebnf, test::letter_vocabulary(vocab));
  return c;
}

// Constrained sequences speculate: each verify row picks under the grammar state after the drafts before it, and
// the greedy output is the plain constrained decode's — with the random MTP head's drafts (drafted under the
// grammar: all verified), and with the target's own continuation spoiled at every fifth position by a letter the
// grammar allows there (verified and rejected) and at others by a token it never allows (not verified).
TEST_F(SpeculativeEngine, ConstrainedGreedyOutputIsIdenticalAndDraftsAreVerifiedUnderTheMasks) {
  const auto constraint = letters_constraint(model_->config().vocab_size, "root ::= [a-e]{12} \"z\"");
  SamplingParams p = greedy(20);
  p.ignore_eos = false;
  p.constraint = constraint;
  const auto add = [&](Engine& e) {
    for (int q = 0; q < 4; ++q) e.add_request("g" + std::to_string(q), prompt_of(q, 9 + 40 * q), p);
  };
  Engine plain(*model_, config(0));
  add(plain);
  const Run expected = run(plain);
  for (const auto& [key, t] : expected.tokens) {
    ASSERT_EQ(t.size(), 14u) << key;  // 12 letters, z, eos
    EXPECT_EQ(t[12], 27) << key;
  }
  {
    Engine e(*model_, config(3));
    add(e);
    const Run got = run(e);
    EXPECT_EQ(got.tokens, expected.tokens);
    EXPECT_EQ(got.logprobs, expected.logprobs);
    // The MTP layer drafts under the grammar (engine/drafter.h): every draft is one the grammar allows, so each is
    // verified (this config verifies every allowed draft); unmasked, the random head's drafts were mostly letters
    // outside it, cut before verification.
    const SpeculativeCounts& t = got.stats.speculative;
    EXPECT_GT(t.drafted, 40);
    EXPECT_EQ(t.verified, t.drafted);
    EXPECT_GT(got.stats.draft_grammar_masks, 0);
  }
  EngineConfig c = config(3);
  c.speculative.test_draft = [&](const Sequence& s, std::span<const int32_t> so_far) -> std::optional<int32_t> {
    const std::vector<int32_t>& truth = expected.tokens.at(s.request_id + "/0");
    const size_t at = s.output.size() + so_far.size();
    if (at >= truth.size()) return std::nullopt;
    if (at % 5 == 3) return truth[at] == 2 ? 3 : 2;  // another letter: allowed there, rejected by the target
    if (at % 5 == 1) return 300;                       // never allowed: the chain is cut before it
    return truth[at];
  };
  Engine e(*model_, c);
  add(e);
  const Run got = run(e);
  EXPECT_EQ(got.tokens, expected.tokens);
  EXPECT_EQ(got.logprobs, expected.logprobs);
  const SpeculativeCounts& t = got.stats.speculative;
  expect_consistent(t, "constrained");
  EXPECT_GT(t.accepted, 0);
  EXPECT_LT(t.accepted, t.verified);  // the other letters
  EXPECT_LT(t.verified, t.drafted);   // the never-allowed drafts and what follows them
  // Fewer steps, but a mask for every verify row as well: one per emitted token (and the end), as without drafts,
  // plus one per rejected draft's row; and the draft steps' own (the chains draft under the grammar, up to the
  // first forced draft it refuses).
  EXPECT_GT(got.stats.draft_grammar_masks, 0);
  EXPECT_EQ(got.stats.grammar_masks,
            expected.stats.grammar_masks + (t.verified - t.accepted) + got.stats.draft_grammar_masks);
  for (const auto& [key, why] : got.why) EXPECT_EQ(why, FinishReason::Stop) << key;
  EXPECT_EQ(got.stats.used_blocks + got.stats.used_slots, 0);
}

// At temperature > 0 under a grammar, the rejection rule checks the draft against the masked distribution: the
// (token 1, token 2) histogram over many seeds matches the plain constrained run's, with token 1's draft forced to
// its most frequent value there (accepted sometimes, rejected sometimes).
TEST_F(SpeculativeEngine, ConstrainedRejectionSampledTokensAreDistributedAsWithoutSpeculation) {
  const int seeds = test::kSanitized ? 400 : 1600;
  SamplingParams p;
  p.temperature = 0.8;
  p.max_tokens = 3;
  p.constraint = letters_constraint(model_->config().vocab_size, "root ::= [a-d] [a-d] [a-d]");
  const auto histogram = [&](EngineConfig c) {
    auto result = pair_histogram(c, p, seeds, 9000, prompt_of(2, 12));
    for (const auto& [pair, f] : result.first)  // the letters a-d only
      EXPECT_TRUE(pair.first >= 2 && pair.first <= 5 && pair.second >= 2 && pair.second <= 5);
    return result;
  };
  const auto [plain, plain_counts] = histogram(config(0, 256, 256, 64));
  const std::map<int32_t, double> first = first_tokens(plain);
  const int32_t d1 = most_frequent(first);
  EngineConfig c = config(2, 256, 256, 64);
  c.speculative.verify = SpeculativeConfig::Verify::Rejection;
  c.speculative.test_draft = [&](const Sequence& s, std::span<const int32_t> so_far) -> std::optional<int32_t> {
    return s.output.size() + so_far.size() == 1 ? std::optional<int32_t>(d1) : std::nullopt;
  };
  const auto [spec, counts] = histogram(c);
  const double tv = total_variation(plain, spec);
  EXPECT_LT(tv, test::kSanitized ? 0.16 : 0.08) << "plain vs speculative constrained histograms";
  EXPECT_GT(1.0 - first.at(d1), 0.2) << "the forced draft is too likely for the check to discriminate";
  EXPECT_EQ(counts.verified, seeds);
  EXPECT_GT(counts.accepted, counts.verified / 5);
  EXPECT_LT(counts.accepted, counts.verified);
}

TEST_F(SpeculativeEngine, BadSettingsAreNamed) {
  const std::unique_ptr<Model> plain = test::tiny_model("speculative_plain", 3, 4);
  EXPECT_NE(error_of([&] { Engine e(*plain, config(2)); }).find("this model has none"), std::string::npos);
  EXPECT_NE(error_of([&] { Engine e(*model_, config(9)); }).find("must be in [0, 8], got 9"), std::string::npos);
  EXPECT_NE(error_of([&] { Engine e(*model_, config(6)); }).find("max_rollback 5"), std::string::npos);
  EngineConfig c = config(2);
  c.speculative.min_prob = 1.5;
  EXPECT_NE(error_of([&] { Engine e(*model_, c); }).find("--speculative-min-prob must be in [0, 1]"), std::string::npos);
  c = config(2);
  c.speculative.forced_acceptance = 1.2;
  EXPECT_NE(error_of([&] { Engine e(*model_, c); }).find("forced acceptance rate must be in [0, 1], got 1.2"),
            std::string::npos);
}

// The benchmark mode (--speculative-forced-acceptance A) does what it says: at A ≈ 0 (1e-12: at 0 the planner,
// told every draft's probability is A, verifies none) every draft is rejected and the output is the plain greedy
// decode's (a rejected draft becomes the model's pick); at A = 1 every verified draft is
// accepted; in between, about A of them (the random MTP head's drafts, which the model would reject).
TEST_F(SpeculativeEngine, ForcedAcceptanceAcceptsThatShareOfTheDrafts) {
  Engine plain(*model_, config(0));
  add_batch(plain, greedy(24));
  const Run expected = run(plain);
  for (const double rate : {1e-12, 1.0, 0.6}) {
    EngineConfig c = config(3);
    c.speculative.forced_acceptance = rate;
    Engine e(*model_, c);
    add_batch(e, greedy(24));
    const Run got = run(e);
    const SpeculativeCounts& sp = got.stats.speculative;
    expect_consistent(sp, "engine");
    ASSERT_GT(sp.verified, 50) << rate;
    for (const auto& [key, t] : got.tokens) EXPECT_EQ(t.size(), 24u) << key << " rate " << rate;
    if (rate < 1e-9) {
      EXPECT_EQ(sp.accepted, 0);
      EXPECT_EQ(got.tokens, expected.tokens);
    } else if (rate == 1.0) {
      EXPECT_EQ(sp.accepted, sp.verified);
      EXPECT_NE(got.tokens, expected.tokens);  // the random head's drafts are in the output
    } else {
      // Accepted drafts: verified ones whose draw fell below the rate, counted up to the first rejection of each
      // step, so the share of verified drafts accepted is below the rate but well above 0.
      const double share = static_cast<double>(sp.accepted) / static_cast<double>(sp.verified);
      EXPECT_GT(share, 0.3) << sp.accepted << "/" << sp.verified;
      EXPECT_LT(share, 0.8) << sp.accepted << "/" << sp.verified;
    }
  }
}

// A checkpoint's draft_vocab.json (draft_vocabulary.h): the MTP head scores only those ids, and output is unchanged
// (greedy, with and without penalties, and sampled: verification decides). Drafts are only ever listed ids.
TEST_F(SpeculativeEngine, AReducedDraftVocabularyKeepsTheOutput) {
  const std::string dir = test::temp_dir("speculative_draft_vocab");
  model::v4::write_random_checkpoint(tiny_mtp_config(), dir, 21, DType::F32);  // the fixture's weights
  std::string ids;
  for (int id = 0; id < 300; ++id) ids += (id ? "," : "") + std::to_string((id * 7) % 512);
  write_text(dir + "/draft_vocab.json", "{\"note\": \"test\", \"ids\": [" + ids + "]}");
  const Model reduced = model::v4::load_model(dir, model::Device::Cpu, model::Precision::Bf16, {}, 5);
  ASSERT_EQ(reduced.draft_vocabulary().size(), 300u);
  SamplingParams penalised = greedy(20);
  penalised.repetition_penalty = 1.3;
  SamplingParams sampled = greedy(20);
  sampled.temperature = 0.8;
  for (const SamplingParams& params : {greedy(20), penalised, sampled}) {
    Engine plain(*model_, config(0));
    add_batch(plain, params);
    const Run expected = run(plain);
    Engine e(reduced, config(3));
    add_batch(e, params);
    const Run got = run(e);
    EXPECT_GT(got.stats.speculative.verified, 0);
    if (params.greedy()) {
      EXPECT_EQ(got.tokens, expected.tokens) << params.repetition_penalty;
    } else {
      for (const auto& [key, t] : got.tokens) EXPECT_EQ(t.size(), 20u) << key;
    }
  }
  // Bad files are named.
  const std::string bad = dir + "/bad.json";
  write_text(bad, "{\"ids\": [1, 2, 1]}");
  EXPECT_NE(error_of([&] { model::v4::read_draft_vocabulary(bad, 512); }).find("token 1 is listed twice"), std::string::npos);
  write_text(bad, "{\"ids\": [1, 600]}");
  EXPECT_NE(error_of([&] { model::v4::read_draft_vocabulary(bad, 512); }).find("ids[1] = 600 is outside the vocabulary [0, 512)"),
            std::string::npos);
  write_text(bad, "[1, 2]");
  EXPECT_NE(error_of([&] { model::v4::read_draft_vocabulary(bad, 512); }).find("expected an object with an \"ids\" array"),
            std::string::npos);
}

TEST(SpeculativeSampling, TopProbabilityIsTheSoftmaxOfTheMaximum) {
  const std::vector<float> logits = {1.0f, 3.0f, -std::numeric_limits<float>::infinity(), 2.0f};
  const double z = std::exp(-2.0) + 1.0 + std::exp(-1.0);
  EXPECT_FLOAT_EQ(cpu::top_probability(logits), static_cast<float>(1.0 / z));
  EXPECT_EQ(cpu::top_probability(std::vector<float>(3, -std::numeric_limits<float>::infinity())), 0.0f);
}

}  // namespace
}  // namespace strata::engine
