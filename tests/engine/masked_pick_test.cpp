// The sampling stage's allowed-token mask on the CPU reference (cpu::apply_mask before cpu::pick_token): a masked
// pick draws from the brute-force distribution — the same filters over only the allowed tokens — for greedy and
// every filter, never outside the mask, and the engine's runner applies it through the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/cpu/sampling.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "reference_sampling.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

model::TokenMask random_mask(size_t vocab, double density, std::mt19937& rng) {
  model::TokenMask mask((vocab + 31) / 32, 0u);
  std::bernoulli_distribution on(density);
  for (size_t id = 0; id < vocab; ++id)
    if (on(rng)) mask[id / 32] |= 1u << (id % 32);
  if (std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; })) mask[0] |= 1u;
  return mask;
}

std::vector<int32_t> allowed_ids(const model::TokenMask& mask, size_t vocab) {
  std::vector<int32_t> ids;
  for (size_t id = 0; id < vocab; ++id)
    if ((mask[id / 32] >> (id % 32)) & 1u) ids.push_back(static_cast<int32_t>(id));
  return ids;
}

// The distribution the pick must draw from: reference_sampling.h's filters over the allowed tokens alone.
std::vector<double> brute_force_probabilities(const std::vector<float>& row, const std::vector<int32_t>& ids,
                                              const model::TokenPick& p) {
  const test::ReferenceFilter f = test::reference_filter(row, ids, p.temperature, p.top_k, p.top_p, p.min_p);
  std::vector<double> out(row.size(), 0.0);
  for (size_t i = 0; i < f.keep; ++i) out[static_cast<size_t>(f.order[i])] = f.prob(f.order[i]) / f.total;
  return out;
}

// The pick is an inverse CDF of the draw: over a grid of n evenly spaced draws each token is picked in proportion
// to its probability, to within one grid step (its interval of draws has exactly that length). Greedy is the first
// most likely allowed token.
TEST(MaskedPick, DrawsFromTheDistributionOverTheAllowedTokensAlone) {
  std::mt19937 rng(5);
  std::normal_distribution<float> logit(0.f, 3.f);
  const size_t vocab = 1000;
  const int grid = 400;
  const std::vector<model::TokenPick> picks = {{1.0, 0, 1.0, 0.0, 0.0},  {0.7, 20, 1.0, 0.0, 0.0},
                                               {1.3, 0, 0.9, 0.0, 0.0},  {1.0, 0, 1.0, 0.05, 0.0},
                                               {0.5, 500, 0.8, 0.01, 0.0}, {2.0, 3, 0.5, 0.0, 0.0}};
  for (double density : {0.004, 0.05, 1.0}) {
    for (int trial = 0; trial < 2; ++trial) {
      std::vector<float> row(vocab);
      for (float& l : row) l = logit(rng);
      const model::TokenMask mask = random_mask(vocab, density, rng);
      const std::vector<int32_t> ids = allowed_ids(mask, vocab);
      std::vector<float> masked = row;
      cpu::apply_mask(masked, mask);
      int32_t best = ids[0];
      for (int32_t id : ids)
        if (row[static_cast<size_t>(id)] > row[static_cast<size_t>(best)]) best = id;
      EXPECT_EQ(cpu::pick_token(masked, {}), best) << "greedy, density " << density;
      for (model::TokenPick p : picks) {
        // The model runner cuts top_k to the allowed count (the same distribution).
        if (p.top_k > 0) p.top_k = std::min<int64_t>(p.top_k, static_cast<int64_t>(ids.size()));
        const std::vector<double> want = brute_force_probabilities(row, ids, p);
        std::vector<int> count(vocab, 0);
        for (int i = 0; i < grid; ++i) {
          p.uniform = (i + 0.5) / grid;
          const int32_t id = cpu::pick_token(masked, p);
          ASSERT_TRUE((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) << "picked " << id << ", outside the mask";
          ++count[static_cast<size_t>(id)];
        }
        for (size_t id = 0; id < vocab; ++id)
          EXPECT_NEAR(count[id] / static_cast<double>(grid), want[id], 1.0 / grid + 1e-9)
              << "token " << id << ", density " << density << " temperature " << p.temperature << " top_k " << p.top_k
              << " top_p " << p.top_p << " min_p " << p.min_p;
      }
    }
  }
}

TEST(MaskedPick, ApplyMaskLeavesAllowedLogitsAndRefusesIdsPastTheWords) {
  std::vector<float> row = {1.f, 2.f, 3.f, 4.f, 5.f};
  cpu::apply_mask(row, model::TokenMask{0b10110u});
  EXPECT_EQ(row[1], 2.f);
  EXPECT_EQ(row[2], 3.f);
  EXPECT_EQ(row[4], 5.f);
  EXPECT_TRUE(std::isinf(row[0]) && row[0] < 0);
  EXPECT_TRUE(std::isinf(row[3]) && row[3] < 0);
  std::vector<float> wide(40, 1.f);
  cpu::apply_mask(wide, model::TokenMask{~0u});  // one word covers ids 0-31 only
  EXPECT_EQ(wide[31], 1.f);
  EXPECT_TRUE(std::isinf(wide[32]));
}

// Through the model runner: a sampling span with a mask picks inside it (greedy and drawn), while its raw logits
// (logprobs) stay the model's.
TEST(MaskedPick, ModelRunnerPicksInsideTheMaskAndKeepsRawLogprobs) {
  const auto model = test::tiny_model("masked_pick", 3);
  const model::v4::Model& m = *model;
  const int64_t vocab = m.config().vocab_size;
  model::StatePool pool(m, {4, 16});
  ModelRunner runner(m, pool);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 6; ++trial) {
    const int32_t slot = pool.acquire_slot().value();
    auto mask = std::make_shared<model::TokenMask>(random_mask(static_cast<size_t>(vocab), 0.01, rng));
    StepPlan plan;
    ScheduledSpan span;
    span.sequence_id = 1;
    span.slot = slot;
    span.tokens = {5, 6, 7};
    ASSERT_TRUE(pool.reserve(pool.slot(slot), 3));
    span.samples = true;
    SamplingParams params;
    params.temperature = trial % 2 ? 1.0 : 0.0;
    params.top_k = trial % 3 == 2 ? 40 : 0;
    span.sampling = SpanSampling{{}, pick_of(params, 11, static_cast<uint64_t>(trial)), 2, mask};
    plan.spans.push_back(span);
    const StepOutput out = runner.execute(plan);
    const int32_t id = out.spans.at(0).tokens.at(0);
    EXPECT_TRUE((*mask)[static_cast<size_t>(id) / 32] >> (id % 32) & 1u) << "picked " << id << ", outside the mask";
    EXPECT_LE(out.spans[0].logprob, 0.f);
    EXPECT_TRUE(std::isfinite(out.spans[0].logprob)) << "logprobs are the raw logits', not the masked ones";
    pool.release_slot(slot);
  }
}

}  // namespace
}  // namespace strata::engine
