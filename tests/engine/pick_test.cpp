// Random picks made by the backend's sampling stage (model::TokenPick, cpu::pick_token): the same token as the
// engine's sampler for the same logits, parameters and draw, on the CPU backend beside chunks that take their
// logits home; and the sampler's own walk order, against a reference that sorts everything.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "backend/cpu/sampling.h"
#include "engine/sampler.h"
#include "reference_sampling.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

using cpu::pick_token;

// The sampler's semantics (reference_sampling.h's filters over the whole vocabulary), then the walk over the kept
// set — in id order when nothing was filtered out and top_p is off, else in likelihood order — to the first token
// whose running mass passes u · total.
int32_t reference_pick(const std::vector<float>& logits, const SamplingParams& p, double u) {
  const size_t n = logits.size();
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  test::ReferenceFilter f = test::reference_filter(logits, all, p.temperature, p.top_k, p.top_p, p.min_p);
  const bool by_id = f.keep == n && p.top_p >= 1;
  if (by_id) f.order = all;
  double acc = 0;
  int32_t id = 0;
  for (size_t i = 0; i < f.keep; ++i) {
    id = f.order[i];
    if ((acc += f.prob(id)) > u * f.total) break;
  }
  return id;
}

std::vector<SamplingParams> parameter_sets() {
  std::vector<SamplingParams> sets;
  for (double t : {0.3, 1.0, 1.7})
    for (int64_t k : {0, 1, 20, 1000})
      for (double top_p : {0.1, 0.9, 1.0})
        for (double min_p : {0.0, 0.05}) {
          SamplingParams p;
          p.temperature = t;
          p.top_k = k;
          p.top_p = top_p;
          p.min_p = min_p;
          sets.push_back(p);
        }
  return sets;
}

// Random rows with ties (logits on a grid) so the tie order matters, and a vocabulary where top_k = 1000 filters.
TEST(Pick, SamplerMatchesTheSortEverythingReferenceAndPickToken) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int64_t compared = 0, differ = 0;
  for (int row = 0; row < 24; ++row) {
    std::vector<float> logits(3000);
    for (float& l : logits) l = std::round(normal(rng) * 8.0f) / 8.0f;
    for (const SamplingParams& p : parameter_sets())
      for (uint64_t step = 0; step < 3; ++step) {
        const uint64_t seed = 100 + static_cast<uint64_t>(row);
        const int32_t host = sample_token(logits, p, {}, seed, step).id;
        EXPECT_EQ(pick_token(logits, pick_of(p, seed, step)), host);
        // Sums in another order may round differently: only a draw within ~1e-13 of a boundary can disagree.
        differ += reference_pick(logits, p, counter_uniform(seed, step)) != host;
        ++compared;
      }
  }
  EXPECT_LE(differ, 0) << differ << " of " << compared << " picks differ from the reference";
}

// A row asking for a random pick gets the token the sampler picks from the logits it would otherwise get, with
// the draw of (seed, step), beside a row that takes its logits home.
TEST(Pick, PickedRowsGetTheSamplersPick) {
  const auto m = test::tiny_model("pick", 3);
  const std::vector<SamplingParams> sets = parameter_sets();
  std::vector<model::SequenceState> solo(3), batched(3);
  for (int q = 0; q < 3; ++q) solo[q] = m->new_sequence(), batched[q] = m->new_sequence();
  int64_t checked = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<model::SequenceChunk> chunks;
    std::vector<Mat> expected;
    std::vector<SamplingParams> params;
    model::LogitsStage stage;
    for (int q = 0; q < 3; ++q) {
      std::vector<int32_t> toks(step == 0 ? 9 + q * 60 : 1);
      for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 37 + q * 101 + step * 7 + 3) % 512);
      expected.push_back(m->forward(toks, solo[q], false));
      chunks.push_back({toks, &batched[q], false});
      params.push_back(sets[static_cast<size_t>(step * 3 + q) % sets.size()]);
      if (q == 1)
        stage.rows.push_back({q, true, {}, std::nullopt, nullptr});
      else
        stage.rows.push_back({q, false, {}, pick_of(params.back(), 77 + static_cast<uint64_t>(q), static_cast<uint64_t>(step)), nullptr});
    }
    const model::StepLogits got = m->run_step(chunks, stage);
    for (int q = 0; q < 3; ++q) {
      if (q == 1) {
        ASSERT_EQ(got.raw.v, expected[q].v) << "step " << step;
        EXPECT_EQ(got.picks[1], -1);
        continue;
      }
      const int32_t want = sample_token({expected[q].row(0), static_cast<size_t>(expected[q].cols)}, params[q], {},
                                        77 + static_cast<uint64_t>(q), static_cast<uint64_t>(step)).id;
      EXPECT_EQ(got.picks[static_cast<size_t>(q)], want) << "sequence " << q << " step " << step;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12);
}

}  // namespace
}  // namespace strata::engine
