// Late masks (engine/model_runner.h LateSpanMasks, model/logits_stage.h LogitsStage::late_masks): a step's grammar
// masks given while the step runs, after its forward, pick exactly what the same masks given with the plan pick —
// tokens, logprobs, top_k cut to the allowed count — and are asked for once, after the forward; a builder that
// throws or gives the wrong number of masks ends the step with an error that names it; the engine builds its
// constrained sequences' masks this way and counts their time (none of it hidden on the CPU backend).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <stdexcept>

#include "engine/letter_vocabulary.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "text/grammar/compiled_grammar.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

using MaskPtr = std::shared_ptr<const model::TokenMask>;

MaskPtr random_mask(int64_t vocab, double density, std::mt19937& rng) {
  auto mask = std::make_shared<model::TokenMask>(static_cast<size_t>((vocab + 31) / 32), 0u);
  std::bernoulli_distribution on(density);
  for (int64_t id = 0; id < vocab; ++id)
    if (on(rng)) (*mask)[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  (*mask)[0] |= 1u << 3;  // never empty
  return mask;
}

bool allows(const model::TokenMask& m, int32_t id) { return (m[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u; }

// Two runners over two pools of one model, fed the same plans: one given the masks with the plan (early), one
// given them late. Their answers must be bit-identical.
class LateMasks : public ::testing::Test {
 protected:
  void SetUp() override { model_ = test::tiny_model("late_masks", 9); }

  // A plan of `tokens.size()` sampling spans over the slots of `pool`; the settings of span q come from `params[q]`
  // (drawn at output position `step`), its mask from `masks[q]` when `early`.
  static StepPlan plan_of(model::StatePool& pool, const std::vector<int32_t>& slots,
                          const std::vector<std::vector<int32_t>>& tokens, const std::vector<SamplingParams>& params,
                          const std::vector<MaskPtr>& masks, bool early, uint64_t step) {
    StepPlan plan;
    for (size_t q = 0; q < tokens.size(); ++q) {
      ScheduledSpan span;
      span.sequence_id = q + 1;
      span.slot = slots[q];
      span.start = pool.slot(slots[q]).num_tokens;
      span.tokens = tokens[q];
      span.samples = true;
      EXPECT_TRUE(pool.reserve(pool.slot(slots[q]), static_cast<int64_t>(tokens[q].size())));
      span.sampling = SpanSampling{{}, pick_of(params[q], 40 + q, step), params[q].logprobs, early ? masks[q] : nullptr};
      plan.spans.push_back(std::move(span));
    }
    return plan;
  }

  std::unique_ptr<model::v4::Model> model_;
};

TEST_F(LateMasks, PickTheSameAsMasksGivenWithThePlan) {
  const model::v4::Model& m = *model_;
  const int64_t vocab = m.config().vocab_size;
  model::StatePool pool_early(m, {4, 32}), pool_late(m, {4, 32});
  ModelRunner early(m, pool_early), late(m, pool_late);
  std::vector<int32_t> slots_early, slots_late;
  for (int q = 0; q < 4; ++q) {
    slots_early.push_back(pool_early.acquire_slot().value());
    slots_late.push_back(pool_late.acquire_slot().value());
  }
  // Greedy; drawn with top_k past and below the allowed count and with logprobs; top_p with min_p; an unmasked row
  // among masked ones.
  std::vector<SamplingParams> params(4);
  params[0].temperature = 0.0;
  params[1].temperature = 1.0;
  params[1].top_k = 200;
  params[1].logprobs = 3;
  params[2].temperature = 0.8;
  params[2].top_p = 0.9;
  params[2].min_p = 0.02;
  params[3].temperature = 1.2;
  params[3].top_k = 5;
  std::vector<std::vector<int32_t>> tokens = {{5, 6, 7}, {9, 10}, {11, 12, 13, 14}, {20}};
  std::mt19937 rng(17);
  int64_t masked_picks = 0;
  for (uint64_t step = 0; step < 8; ++step) {
    std::vector<MaskPtr> masks(4);
    for (int q = 0; q < 4; ++q)
      if (q != 2 || step % 2) masks[static_cast<size_t>(q)] = random_mask(vocab, q == 1 ? 0.05 : 0.3, rng);
    // The late runner's masks: the spans that have one this step, in span order.
    LateSpanMasks given;
    std::vector<MaskPtr> late_masks;
    for (size_t q = 0; q < masks.size(); ++q)
      if (masks[q]) {
        given.spans.push_back(q);
        late_masks.push_back(masks[q]);
      }
    StepPlan plan_early = plan_of(pool_early, slots_early, tokens, params, masks, true, step);
    StepPlan plan_late = plan_of(pool_late, slots_late, tokens, params, masks, false, step);
    int calls = 0;
    given.build = [&] {
      ++calls;
      // At the same logical point on every backend: after the forward (on the CPU, it has run).
      for (size_t q = 0; q < tokens.size(); ++q)
        EXPECT_EQ(pool_late.slot(slots_late[q]).num_tokens, plan_late.spans[q].end()) << "span " << q;
      return late_masks;
    };
    const StepOutput a = early.execute(plan_early);
    const StepOutput b = late.execute(plan_late, given);
    EXPECT_EQ(calls, 1) << "step " << step;
    EXPECT_FALSE(b.late_masks_hidden) << "the CPU backend computes on the calling thread";
    ASSERT_EQ(a.spans.size(), b.spans.size());
    for (size_t q = 0; q < a.spans.size(); ++q) {
      ASSERT_EQ(a.spans[q].tokens, b.spans[q].tokens) << "step " << step << " span " << q;
      EXPECT_EQ(a.spans[q].logprob, b.spans[q].logprob) << "step " << step << " span " << q;
      EXPECT_EQ(a.spans[q].top_logprobs, b.spans[q].top_logprobs) << "step " << step << " span " << q;
      if (masks[q]) {
        EXPECT_TRUE(allows(*masks[q], a.spans[q].tokens[0])) << "step " << step << " span " << q;
        ++masked_picks;
      }
      tokens[q] = {a.spans[q].tokens[0]};
    }
  }
  EXPECT_GT(masked_picks, 20);
}

TEST_F(LateMasks, ABuilderThatThrowsOrMiscountsEndsTheStepWithAnError) {
  const model::v4::Model& m = *model_;
  model::StatePool pool(m, {4, 32});
  ModelRunner runner(m, pool);
  std::vector<SamplingParams> params(2);
  params[0].temperature = params[1].temperature = 0.0;
  const std::vector<MaskPtr> none(2);
  auto fresh_plan = [&] {
    std::vector<int32_t> slots = {pool.acquire_slot().value(), pool.acquire_slot().value()};
    return std::pair{plan_of(pool, slots, {{5, 6}, {7}}, params, none, false, 0), slots};
  };
  auto expect_error = [&](const LateSpanMasks& late, const std::string& what) {
    auto [plan, slots] = fresh_plan();
    try {
      runner.execute(plan, late);
      ADD_FAILURE() << "expected an error about " << what;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    for (int32_t s : slots) pool.release_slot(s);
  };
  const auto mask = std::make_shared<const model::TokenMask>(model::TokenMask(16, ~0u));
  expect_error({{0, 1}, [] () -> std::vector<MaskPtr> { throw std::runtime_error("the grammar broke"); }},
               "the grammar broke");
  expect_error({{0, 1}, [] () -> std::vector<MaskPtr> { fail("matcher: state lost"); }}, "matcher: state lost");
  expect_error({{0, 1}, [&] { return std::vector<MaskPtr>{mask}; }}, "1 late masks came for 2 rows");
  expect_error({{1, 0}, [&] { return std::vector<MaskPtr>{mask, mask}; }}, "out of order");
  expect_error({{0, 2}, [&] { return std::vector<MaskPtr>{mask, mask}; }}, "outside the plan's 2 spans");
  expect_error({{0}, {}}, "nothing builds them");

  // A span that already has its mask, or does not sample, cannot get one late.
  auto [plan, slots] = fresh_plan();
  plan.spans[0].sampling->allowed = mask;
  EXPECT_THROW(runner.execute(plan, {{0}, [&] { return std::vector<MaskPtr>{mask}; }}), Error);
  plan.spans[0].sampling->allowed = nullptr;
  plan.spans[0].samples = false;
  plan.spans[0].sampling.reset();
  EXPECT_THROW(runner.execute(plan, {{0}, [&] { return std::vector<MaskPtr>{mask}; }}), Error);
}

// The engine builds its constrained sequences' masks late, counts them and their time; on the CPU backend none of
// it is hidden (the forward has run before).
TEST_F(LateMasks, EngineCountsMaskTimeAndNoneHiddenOnTheCpu) {
  const auto vocabulary = test::letter_vocabulary(model_->config().vocab_size);
  auto c = std::make_shared<OutputConstraint>();
  c->grammar = text::grammar::CompiledGrammar::from_ebnf("root ::= [a-e]{12} \"z\"", vocabulary);
  EngineConfig cfg;
  cfg.pool = {8, 64};
  Engine e(*model_, cfg);
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 4;
  p.max_tokens = 20;
  p.n = 8;
  p.constraint = c;
  e.add_request("g", {5, 6, 7}, p);
  std::map<int64_t, std::string> text;
  while (e.has_unfinished())
    for (const TokenEvent& ev : e.step())
      if (ev.token && *ev.token != 1) text[ev.index] += static_cast<char>('a' + *ev.token - 2);
  ASSERT_EQ(text.size(), 8u);
  for (const auto& [index, t] : text) EXPECT_TRUE(t.size() == 13 && t.back() == 'z') << index << ": " << t;
  const EngineStats s = e.stats();
  EXPECT_EQ(s.grammar_masks, 8 * 14);  // 13 letters and the end
  EXPECT_GT(s.grammar_mask_seconds, 0.0);
  EXPECT_EQ(s.grammar_mask_hidden_seconds, 0.0);
  EXPECT_GE(s.model_seconds, s.grammar_mask_seconds) << "the masks are built inside the runner's call";
}

}  // namespace
}  // namespace strata::engine
