// The engine against the plain model: whatever the batching, chunking and preemption, each request's tokens are
// those of running it alone; state memory returns to zero; bad requests are named.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "core/error.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

using model::v4::Model;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = test::tiny_model("engine", 11).release(); }
  static void TearDownTestSuite() { delete model_; }

  // Tokens the model alone produces: prefill then one forward per token, sampling as the engine does.
  static std::vector<int32_t> solo(const std::vector<int32_t>& prompt, const SamplingParams& p, uint64_t seed) {
    auto st = model_->new_sequence();
    Mat logits = model_->forward(prompt, st, false);
    TokenHistory h;
    h.add_prompt(prompt);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < p.max_tokens; ++i) {
      const int32_t t = sample_token({logits.row(0), 512}, p, h, seed, static_cast<uint64_t>(i)).id;
      out.push_back(t);
      h.add_output(t);
      if (!p.ignore_eos && t == 1) break;
      logits = model_->forward({t}, st, false);
    }
    return out;
  }

  static std::map<std::string, std::vector<int32_t>> run_all(Engine& e, std::map<std::string, FinishReason>* why = nullptr) {
    std::map<std::string, std::vector<int32_t>> got;
    for (int guard = 0; e.has_unfinished() && guard < 10000; ++guard)
      for (const TokenEvent& ev : e.step()) {
        const std::string key = ev.request_id + "/" + std::to_string(ev.index);
        if (ev.token) got[key].push_back(*ev.token);
        if (ev.finished && why) (*why)[key] = ev.reason;
      }
    return got;
  }

  static std::vector<int32_t> prompt_of(int q, int64_t len) {
    std::vector<int32_t> p;
    for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((i * 37 + q * 101 + 2) % 510 + 2));
    return p;
  }

  static Model* model_;
};
Model* EngineTest::model_ = nullptr;

EngineConfig small_config(int64_t budget, int64_t blocks, int64_t seqs = 8) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = seqs;
  c.pool.max_sequences = seqs;
  c.pool.blocks = blocks;  // token blocks of 128 tokens
  return c;
}

TEST_F(EngineTest, ContinuousBatchingWithChunkedPrefillMatchesSoloRuns) {
  Engine e(*model_, small_config(/*budget=*/48, /*blocks=*/64));
  const std::vector<int64_t> lengths = {5, 140, 33, 1, 260, 129};
  std::map<std::string, std::vector<int32_t>> expected;
  for (size_t q = 0; q < lengths.size(); ++q) {
    SamplingParams p;
    p.temperature = q % 2 ? 0.9 : 0.0;
    p.seed = 1000 + q;
    p.max_tokens = 12;
    p.ignore_eos = true;
    e.add_request("r" + std::to_string(q), prompt_of(static_cast<int>(q), lengths[q]), p);
    expected["r" + std::to_string(q) + "/0"] = solo(prompt_of(static_cast<int>(q), lengths[q]), p, *p.seed);
  }
  EXPECT_EQ(run_all(e), expected);
  const EngineStats s = e.stats();
  EXPECT_EQ(s.running + s.waiting + s.used_slots + s.used_blocks, 0);
  EXPECT_EQ(s.generated_tokens, 12 * 6);
}

TEST_F(EngineTest, PreemptionByRecomputeGivesTheSameTokens) {
  // Each sequence reaches 174 tokens, two token blocks; five blocks cannot hold all four at once: the newest get
  // preempted.
  Engine e(*model_, small_config(/*budget=*/64, /*blocks=*/5, /*seqs=*/4));
  std::map<std::string, std::vector<int32_t>> expected;
  for (int q = 0; q < 4; ++q) {
    SamplingParams p;
    p.temperature = 0.8;
    p.seed = 7 + q;
    p.max_tokens = 24;
    p.ignore_eos = true;
    e.add_request("p" + std::to_string(q), prompt_of(q, 150), p);
    expected["p" + std::to_string(q) + "/0"] = solo(prompt_of(q, 150), p, *p.seed);
  }
  EXPECT_EQ(run_all(e), expected);
  EXPECT_GT(e.stats().preemptions, 0);
  EXPECT_EQ(e.stats().used_blocks, 0);
}

TEST_F(EngineTest, SeededSamplingIgnoresBatchCompanionsAndNGivesDistinctStreams) {
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 99;
  p.max_tokens = 10;
  p.ignore_eos = true;
  p.n = 3;
  Engine alone(*model_, small_config(256, 64));
  alone.add_request("x", prompt_of(1, 20), p);
  const auto a = run_all(alone);
  Engine crowded(*model_, small_config(256, 64));
  for (int q = 0; q < 5; ++q) {
    SamplingParams other = p;
    other.seed = 500 + q;
    other.n = 1;
    crowded.add_request("o" + std::to_string(q), prompt_of(q + 3, 30 + q), other);
  }
  crowded.add_request("x", prompt_of(1, 20), p);
  auto b = run_all(crowded);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.at("x/" + std::to_string(i)), b.at("x/" + std::to_string(i)));
  EXPECT_NE(a.at("x/0"), a.at("x/1"));
}

TEST_F(EngineTest, AbortFreesStateAndReportsAbort) {
  Engine e(*model_, small_config(32, 64));
  SamplingParams p;
  p.max_tokens = 50;
  p.ignore_eos = true;
  e.add_request("keep", prompt_of(0, 10), p);
  e.add_request("drop", prompt_of(1, 200), p);
  size_t early = 0;  // "keep" samples during the two steps before the abort
  for (int i = 0; i < 2; ++i)
    for (const TokenEvent& ev : e.step()) early += ev.request_id == "keep" && ev.token ? 1 : 0;
  EXPECT_TRUE(e.abort("drop"));
  EXPECT_FALSE(e.abort("drop"));
  std::map<std::string, FinishReason> why;
  const auto got = run_all(e, &why);
  EXPECT_EQ(why.at("drop/0"), FinishReason::Abort);
  EXPECT_EQ(why.at("keep/0"), FinishReason::Length);
  EXPECT_EQ(early + got.at("keep/0").size(), 50u);
  EXPECT_EQ(e.stats().used_slots + e.stats().used_blocks, 0);
}

TEST_F(EngineTest, StopTokensAndMaxTokens) {
  Engine e(*model_, small_config(64, 64));
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 8;
  p.ignore_eos = true;
  const std::vector<int32_t> greedy = solo(prompt_of(2, 12), p, 0);
  SamplingParams stop = p;
  stop.stop_token_ids = {greedy[3]};
  e.add_request("stop", prompt_of(2, 12), stop);
  SamplingParams zero = p;
  zero.max_tokens = 0;
  e.add_request("zero", prompt_of(2, 12), zero);
  std::map<std::string, FinishReason> why;
  const auto got = run_all(e, &why);
  const auto first = std::find(greedy.begin(), greedy.end(), greedy[3]);
  EXPECT_EQ(got.at("stop/0"), std::vector<int32_t>(greedy.begin(), first + 1));
  EXPECT_EQ(why.at("stop/0"), FinishReason::Stop);
  EXPECT_EQ(got.count("zero/0"), 0u);
  EXPECT_EQ(why.at("zero/0"), FinishReason::Length);
}

TEST_F(EngineTest, BadRequestsAreNamed) {
  EngineConfig c = small_config(64, 64);
  c.max_model_len = 300;
  Engine e(*model_, c);
  SamplingParams ok;
  ok.max_tokens = 4;
  auto expect_error = [&](const std::string& id, std::vector<int32_t> prompt, SamplingParams p, const std::string& needle) {
    try {
      e.add_request(id, std::move(prompt), p);
      ADD_FAILURE() << "expected an error containing " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  expect_error("a", {}, ok, "at least one token");
  expect_error("b", {1, 600}, ok, "outside the vocabulary");
  expect_error("c", prompt_of(0, 299), ok, "max_model_len");
  SamplingParams bad = ok;
  bad.top_p = 2;
  expect_error("d", {5}, bad, "top_p");
  e.add_request("dup", {5}, ok);
  expect_error("dup", {5}, ok, "already in flight");
  EngineConfig tight = small_config(64, 1);  // 204 tokens need two token blocks
  Engine t(*model_, tight);
  try {
    t.add_request("long", prompt_of(0, 200), ok);
    ADD_FAILURE() << "expected a state-memory error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("state pool"), std::string::npos) << err.what();
  }
}

// Penalties and logprobs go through the runner's sampling stage (penalties applied where the logits are, logprobs
// from the raw row brought home): tokens and logprobs are those of the host sampler on the solo logits.
TEST_F(EngineTest, PenaltiesAndLogprobsThroughTheSamplingStageMatchTheHostSampler) {
  Engine e(*model_, small_config(/*budget=*/40, /*blocks=*/64));
  std::map<std::string, std::vector<int32_t>> expected;
  std::map<std::string, std::vector<float>> expected_logprobs;
  for (int q = 0; q < 4; ++q) {
    SamplingParams p;
    p.temperature = q == 0 ? 0.0 : 0.9;
    p.repetition_penalty = q % 2 ? 1.4 : 1.0;
    p.presence_penalty = q >= 2 ? 0.6 : 0.0;
    p.frequency_penalty = q == 3 ? 0.3 : 0.0;
    if (q == 0) p.repetition_penalty = 1.2;
    p.logprobs = q;
    p.seed = 40 + q;
    p.max_tokens = 10;
    p.ignore_eos = true;
    const std::string id = "pen" + std::to_string(q);
    e.add_request(id, prompt_of(q, 20 + 30 * q), p);
    // The solo run, with the host sampler's logprobs.
    auto st = model_->new_sequence();
    Mat logits = model_->forward(prompt_of(q, 20 + 30 * q), st, false);
    TokenHistory h;
    h.add_prompt(prompt_of(q, 20 + 30 * q));
    for (int64_t i = 0; i < p.max_tokens; ++i) {
      const SampledToken t = sample_token({logits.row(0), 512}, p, h, *p.seed, static_cast<uint64_t>(i));
      expected[id + "/0"].push_back(t.id);
      expected_logprobs[id + "/0"].push_back(t.logprob);
      h.add_output(t.id);
      logits = model_->forward({t.id}, st, false);
    }
  }
  std::map<std::string, std::vector<int32_t>> got;
  std::map<std::string, std::vector<float>> got_logprobs;
  while (e.has_unfinished())
    for (const TokenEvent& ev : e.step()) {
      if (!ev.token) continue;
      const std::string key = ev.request_id + "/" + std::to_string(ev.index);
      got[key].push_back(*ev.token);
      got_logprobs[key].push_back(ev.logprob);
      EXPECT_EQ(static_cast<int64_t>(ev.top_logprobs.size()), std::stoi(ev.request_id.substr(3))) << key;
    }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(got_logprobs, expected_logprobs);
}

// logit_bias through the backend's sampling stage (the step plan's penalties): a request with a bias and no
// penalty gets the host sampler's tokens, a +100 bias forces its token at every step, and -100 bans the token the
// unbiased greedy run picks first.
TEST_F(EngineTest, LogitBiasThroughTheSamplingStageMatchesTheHostSampler) {
  Engine e(*model_, small_config(/*budget=*/64, /*pages=*/4096));
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 6;
  greedy.ignore_eos = true;
  const std::vector<int32_t> unbiased = solo(prompt_of(5, 24), greedy, 0);
  std::map<std::string, std::vector<int32_t>> expected;
  SamplingParams forced = greedy;
  forced.logit_bias = {{77, 100.0f}};
  e.add_request("forced", prompt_of(5, 24), forced);
  expected["forced/0"] = std::vector<int32_t>(6, 77);
  SamplingParams banned = greedy;
  banned.logit_bias = {{unbiased[0], -100.0f}, {3, 2.5f}};
  e.add_request("banned", prompt_of(5, 24), banned);
  expected["banned/0"] = solo(prompt_of(5, 24), banned, 0);
  SamplingParams sampled = banned;
  sampled.temperature = 0.8;
  sampled.seed = 9;
  e.add_request("sampled", prompt_of(6, 30), sampled);
  expected["sampled/0"] = solo(prompt_of(6, 30), sampled, 9);
  const auto got = run_all(e);
  EXPECT_EQ(got, expected);
  EXPECT_NE(got.at("banned/0").at(0), unbiased[0]);
}

// A logits capture (what `strata generate --dump-logits` asks): the first event carries the raw logits of every
// prompt position and each event the row its token was picked from — the rows of a solo all-logits run, bit for
// bit, whether the prompt ran in chunks and whether the sequence was preempted and recomputed on the way.
TEST_F(EngineTest, LogitsCaptureGivesEveryPromptRowAndEachPickedRow) {
  for (const bool crowded : {false, true}) {
    Engine e(*model_, crowded ? small_config(/*budget=*/64, /*blocks=*/5, /*seqs=*/4) : small_config(/*budget=*/48, /*blocks=*/64));
    SamplingParams p;
    p.temperature = 0.7;
    p.seed = 5;
    p.max_tokens = 24;
    p.ignore_eos = true;
    p.capture_logits = true;
    const std::vector<int32_t> prompt = prompt_of(9, 150);
    if (crowded) {  // older sequences that leave too few pages: the captured one, the newest, gets preempted
      for (int q = 0; q < 3; ++q) {
        SamplingParams o = p;
        o.capture_logits = false;
        e.add_request("o" + std::to_string(q), prompt_of(q, 150), o);
      }
    }
    e.add_request("c", prompt, p);
    std::vector<float> prompt_logits, gen_logits;
    std::vector<int32_t> tokens;
    while (e.has_unfinished())
      for (TokenEvent& ev : e.step()) {
        if (ev.request_id != "c" || !ev.token) continue;
        if (tokens.empty()) prompt_logits = std::move(ev.prompt_logits);
        EXPECT_TRUE(tokens.empty() || ev.prompt_logits.empty());
        tokens.push_back(*ev.token);
        gen_logits.insert(gen_logits.end(), ev.logits.begin(), ev.logits.end());
      }
    if (crowded) {
      EXPECT_GT(e.stats().preemptions, 0);
    }
    auto st = model_->new_sequence();
    const Mat want_prompt = model_->forward(prompt, st, true);
    ASSERT_EQ(prompt_logits.size(), want_prompt.v.size()) << "crowded " << crowded;
    EXPECT_TRUE(test::same_finite_bits(prompt_logits.data(), want_prompt.v.data(), want_prompt.v.size()));
    ASSERT_EQ(tokens.size(), 24u);
    std::vector<float> want_gen(want_prompt.row(want_prompt.rows - 1), want_prompt.row(want_prompt.rows - 1) + 512);
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const Mat row = model_->forward({tokens[i]}, st, false);
      want_gen.insert(want_gen.end(), row.v.begin(), row.v.end());
    }
    ASSERT_EQ(gen_logits.size(), want_gen.size());
    EXPECT_TRUE(test::same_finite_bits(gen_logits.data(), want_gen.data(), want_gen.size())) << "crowded " << crowded;
  }
}

}  // namespace
}  // namespace strata::engine
