// Random weights built in memory for benchmarks (random_init.h, random_weights): the checkpoint writer's tensors,
// loadable, deterministic whatever the thread count, with the intended spread, and routing over many experts.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "model/deepseek_v4/weights.h"
#include "model/safetensors.h"

namespace strata {
namespace {

std::vector<float> values(const WeightRef& w) {
  std::vector<float> v(static_cast<size_t>(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) w.row_f32(r, v.data() + r * w.cols);
  return v;
}

double standard_deviation(const std::vector<float>& v) {
  double sum = 0, squares = 0;
  for (float x : v) {
    sum += x;
    squares += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size()), mean = sum / n;
  return std::sqrt(squares / n - mean * mean);
}

TEST(RandomWeights, SameValuesWithAnyThreadCount) {
  const model::ModelConfig c = model::v4::preset_config("small", 2);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const model::v4::ModelWeights one = model::v4::random_weights(c, 9, DType::BF16);
  omp_set_num_threads(3);
  const model::v4::ModelWeights three = model::v4::random_weights(c, 9, DType::BF16);
  omp_set_num_threads(threads);
  EXPECT_EQ(values(one.embed), values(three.embed));
  EXPECT_EQ(values(one.layers[1].ffn.experts[7].w2), values(three.layers[1].ffn.experts[7].w2));
  EXPECT_EQ(one.layers[1].attn.attn_sink, three.layers[1].attn.attn_sink);
  EXPECT_EQ(one.layers[0].ffn.tid2eid, three.layers[0].ffn.tid2eid);
  // Another seed, other values.
  const model::v4::ModelWeights other = model::v4::random_weights(c, 10, DType::BF16);
  EXPECT_NE(values(one.embed), values(other.embed));
}

TEST(RandomWeights, MatricesHaveTheCheckpointSpread) {
  const model::ModelConfig c = model::v4::preset_config("small", 2);
  for (const DType dt : {DType::BF16, DType::F8_E4M3}) {
    const model::v4::ModelWeights w = model::v4::random_weights(c, 1, dt);
    const WeightRef& w1 = w.layers[1].ffn.experts[3].w1;  // [inter, hidden]: std 1/sqrt(hidden)
    EXPECT_EQ(w1.dtype, dt);
    EXPECT_NEAR(standard_deviation(values(w1)) * std::sqrt(static_cast<double>(c.hidden_size)), 1.0, 0.03)
        << dtype_name(dt);
    EXPECT_NEAR(standard_deviation(values(w.embed)), 1.0, 0.02);  // BF16 even in FP8 checkpoints
    double mean_norm = 0;
    for (float x : w.layers[0].attn_norm) mean_norm += x;
    EXPECT_NEAR(mean_norm / static_cast<double>(c.hidden_size), 1.0, 0.02);
  }
}

TEST(RandomWeights, TokensSpreadOverTheExperts) {
  const model::ModelConfig c = model::v4::preset_config("small", 3);  // layer 2 routes by score
  model::v4::Model m(c, model::v4::random_weights(c, 4, DType::BF16));
  model::SequenceState s = m.new_sequence();
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 64; ++i) prompt.push_back((i * 7919 + 17) % static_cast<int32_t>(c.vocab_size));
  const Mat logits = m.forward(prompt, s, false);
  for (float x : logits.v) ASSERT_TRUE(std::isfinite(x));
  // 64 tokens × top-4 of 32 experts: a router that prefers a few experts would leave most idle.
  EXPECT_GE(m.routed_experts_last_forward()[2], 28);
}

TEST(RandomWeights, AFastFilledCheckpointHoldsTheInMemoryValues) {
  // `strata model init --fill fast`: the benchmarks' generator written to disk, so a checkpoint of real V4-Flash
  // layers takes seconds; loading it gives exactly what random_weights makes, FP8 scales included.
  const model::ModelConfig c = model::v4::preset_config("small", 2);
  const std::string dir = ::testing::TempDir() + "strata_fast_fill";
  for (const DType dt : {DType::BF16, DType::F8_E4M3}) {
    model::v4::write_random_checkpoint(c, dir, 5, dt, model::v4::RandomFill::Fast);
    const model::ModelConfig cfg = model::v4::random_checkpoint_config(c, dt);
    const model::v4::ModelWeights read =
        model::v4::load_weights(cfg, std::make_shared<model::TensorStore>(model::TensorStore::open(dir)));
    const model::v4::ModelWeights made = model::v4::random_weights(c, 5, dt);
    EXPECT_EQ(values(read.embed), values(made.embed)) << dtype_name(dt);
    EXPECT_EQ(values(read.layers[1].ffn.experts[7].w2), values(made.layers[1].ffn.experts[7].w2)) << dtype_name(dt);
    EXPECT_EQ(values(read.layers[0].attn.wq_a), values(made.layers[0].attn.wq_a)) << dtype_name(dt);
    EXPECT_EQ(read.layers[1].attn.attn_sink, made.layers[1].attn.attn_sink);
    EXPECT_EQ(read.layers[0].ffn.tid2eid, made.layers[0].ffn.tid2eid);
    // Not the exact draws: those are another distribution's values.
    model::v4::write_random_checkpoint(c, dir, 5, dt);
    const model::v4::ModelWeights exact =
        model::v4::load_weights(cfg, std::make_shared<model::TensorStore>(model::TensorStore::open(dir)));
    EXPECT_NE(values(exact.embed), values(made.embed));
  }
  EXPECT_THROW(model::v4::write_random_checkpoint(c, dir, 5, DType::F4_E2M1X2, model::v4::RandomFill::Fast), Error);
}

TEST(RandomWeights, RejectsOtherDtypes) {
  EXPECT_THROW(model::v4::random_weights(model::v4::preset_config("tiny"), 0, DType::F4_E2M1X2), Error);
  EXPECT_THROW(model::v4::random_weights(model::v4::preset_config("tiny"), 0, DType::I8), Error);
}

}  // namespace
}  // namespace strata
