#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "core/error.h"

namespace strata::engine {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};

SampledToken draw(const SamplingParams& p, uint64_t seed, uint64_t step, const TokenHistory& h = {}) {
  return sample_token(kLogits, p, h, seed, step);
}

TEST(Sampler, GreedyTakesTheFirstMaximum) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(draw(p, 1, 0).id, 1);  // ids 1 and 3 tie at 3.0
}

TEST(Sampler, FiltersThatLeaveOneTokenAreGreedy) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 2.9f, -1.0f};  // no tie at the top
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams p;
    if (variant == 0) p.top_k = 1;
    if (variant == 1) p.top_p = 1e-6;
    if (variant == 2) p.min_p = 1.0;
    for (uint64_t s = 0; s < 50; ++s) EXPECT_EQ(sample_token(logits, p, {}, s, s).id, 1) << "variant " << variant;
  }
}

TEST(Sampler, SameSeedAndStepSameTokenWhateverCameBefore) {
  SamplingParams p;
  for (uint64_t step = 0; step < 20; ++step) {
    const int32_t a = draw(p, 42, step).id;
    draw(p, 7, step);  // other requests' draws do not disturb a counter-based stream
    EXPECT_EQ(draw(p, 42, step).id, a);
  }
}

TEST(Sampler, FrequenciesFollowTheTemperedSoftmax) {
  SamplingParams p;
  p.temperature = 0.7;
  std::vector<double> expect(kLogits.size());
  double z = 0;
  for (size_t i = 0; i < kLogits.size(); ++i) z += expect[i] = std::exp(kLogits[i] / 0.7);
  std::vector<int> count(kLogits.size());
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(draw(p, 1234, static_cast<uint64_t>(i)).id)];
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double pi = expect[i] / z, sd = std::sqrt(pi * (1 - pi) / n);
    EXPECT_NEAR(count[i] / static_cast<double>(n), pi, 5 * sd + 1e-4) << "token " << i;
  }
}

TEST(Sampler, TopKAndTopPKeepOnlyTheHead) {
  SamplingParams k2;
  k2.top_k = 2;  // ids 1 and 3
  SamplingParams p_half;
  p_half.top_p = 0.5;  // the two 3.0 logits hold ~0.58 of the mass: the first one alone is < 0.5, so both stay
  std::map<int32_t, int> seen_k, seen_p;
  for (uint64_t s = 0; s < 2000; ++s) {
    ++seen_k[draw(k2, 9, s).id];
    ++seen_p[draw(p_half, 9, s).id];
  }
  EXPECT_EQ(seen_k.size(), 2u);
  EXPECT_TRUE(seen_k.count(1) && seen_k.count(3));
  EXPECT_EQ(seen_p.size(), 2u);
  EXPECT_TRUE(seen_p.count(1) && seen_p.count(3));
}

TEST(Sampler, PenaltiesFollowVllmSemantics) {
  SamplingParams p;
  p.temperature = 0;
  TokenHistory h;
  h.add_output(1);
  p.frequency_penalty = 0.6;  // id 1: 3.0 − 0.6 → id 3 wins
  EXPECT_EQ(draw(p, 0, 0, h).id, 3);
  p.frequency_penalty = 0;
  p.repetition_penalty = 2.0;  // id 1: 3.0 / 2 → id 3 wins
  EXPECT_EQ(draw(p, 0, 0, h).id, 3);
  TokenHistory prompt_only;
  const int32_t prompt[] = {1, 3};
  prompt_only.add_prompt(prompt);
  p.repetition_penalty = 4.0;  // both 3.0 logits → 0.75, id 2 (2.0) wins; presence ignores the prompt
  EXPECT_EQ(draw(p, 0, 0, prompt_only).id, 2);
  p.repetition_penalty = 1.0;
  p.presence_penalty = 2.0;
  EXPECT_EQ(draw(p, 0, 0, prompt_only).id, 1);
}

TEST(Sampler, HistoryIsKeptOnlyForPenalties) {
  SamplingParams p;
  EXPECT_FALSE(p.uses_history());
  TokenHistory untracked(p.uses_history());
  const int32_t prompt[] = {1, 3};
  untracked.add_prompt(prompt);
  untracked.add_output(1);
  EXPECT_TRUE(untracked.seen().empty());
  EXPECT_TRUE(untracked.output_counts().empty());
  p.temperature = 0;
  EXPECT_EQ(draw(p, 0, 0, untracked).id, 1);  // no penalty: the untracked history is never read
  p.presence_penalty = 0.5;
  EXPECT_TRUE(p.uses_history());
  EXPECT_THROW(draw(p, 0, 0, untracked), strata::Error);  // a penalty would silently see nothing: refused
}

// logit_bias is added to the raw logits before the penalties and the temperature (OpenAI / vLLM), needs no token
// history, and leaves the reported logprobs those of the raw logits.
TEST(Sampler, LogitBiasIsAddedBeforePenaltiesAndTemperature) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{4, 4.5f}};  // id 4: −1 + 4.5 = 3.5 beats the 3.0s
  EXPECT_FALSE(p.uses_history());
  EXPECT_TRUE(p.processes_logits());
  TokenHistory untracked(p.uses_history());
  EXPECT_EQ(draw(p, 0, 0, untracked).id, 4);
  p.logit_bias = {{1, -100.0f}};  // banned: the other 3.0 wins
  EXPECT_EQ(draw(p, 0, 0, untracked).id, 3);
  // Before the repetition penalty: id 0 (1.0 + 4 = 5.0) is halved → 2.5, and id 1's 3.0 wins (after it, id 0 would
  // have 0.5 + 4 = 4.5 and win).
  p.logit_bias = {{0, 4.0f}};
  p.repetition_penalty = 2.0;
  TokenHistory seen;
  const int32_t prompt[] = {0};
  seen.add_prompt(prompt);
  EXPECT_EQ(draw(p, 0, 0, seen).id, 1);
  p.repetition_penalty = 1.0;
  p.logprobs = 0;
  const SampledToken biased = draw(p, 0, 0, untracked);
  EXPECT_EQ(biased.id, 0);
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  EXPECT_NEAR(biased.logprob, 1.0 - std::log(z), 1e-5);
  // With temperature, a +100 bias takes every draw.
  p.temperature = 1.5;
  p.logit_bias = {{5, 100.0f}};
  for (uint64_t step = 0; step < 20; ++step) EXPECT_EQ(draw(p, 7, step, untracked).id, 5);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  p.frequency_penalty = 1.0;  // penalties change the choice, not the reported distribution
  TokenHistory h;
  h.add_output(1);
  const SampledToken t = draw(p, 0, 0, h);
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  EXPECT_EQ(t.id, 3);
  EXPECT_NEAR(t.logprob, 3.0 - std::log(z), 1e-5);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_EQ(t.top[1].first, 3);
  EXPECT_EQ(t.top[2].first, 2);
  EXPECT_NEAR(t.top[2].second, 2.0 - std::log(z), 1e-5);
}

TEST(Sampler, InvalidParametersAreNamed) {
  const std::vector<std::pair<std::string, std::function<void(SamplingParams&)>>> cases = {
      {"temperature", [](SamplingParams& p) { p.temperature = -1; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -3; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 3; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = NAN; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = -1; }},
      {"n", [](SamplingParams& p) { p.n = 0; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {6}; }},
      {"stop", [](SamplingParams& p) { p.stop = {""}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{6, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{2, 100.5f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{2, 1.0f}, {3, 1.0f}, {2, -1.0f}}; }},
  };
  for (const auto& [name, spoil] : cases) {
    SamplingParams p;
    spoil(p);
    try {
      p.validate(6);
      ADD_FAILURE() << name << ": expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(name + ":", 0), 0u) << e.what();
    }
  }
  EXPECT_NO_THROW(SamplingParams{}.validate(6));
}

}  // namespace
}  // namespace strata::engine
