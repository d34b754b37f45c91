// DeepSeek-V4.1's fp32 CPU forward against the project's PyTorch reference (tests/gpu/v41_reference.py): the
// fixture tests/fixtures/v41/small/ (written by tests/reference/v41_forward_fixture.py) holds a small random model
// with every layer kind and the reference's logits of 48 tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek_v41/forward_cpu.h"
#include "model/deepseek_v41/weights.h"

namespace strata::model::v41 {
namespace {

const std::string kDir = std::string(STRATA_FIXTURES) + "/v41/small";

struct Expected {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Expected load_expected() {
  std::ifstream in(kDir + "/expected.json");
  EXPECT_TRUE(in.good()) << "missing " << kDir << "/expected.json";
  const nlohmann::json j = nlohmann::json::parse(in);
  return {j["tokens"].get<std::vector<int32_t>>(), j["logits"].get<std::vector<std::vector<float>>>()};
}

double max_abs_diff(const Mat& got, const std::vector<std::vector<float>>& want) {
  double worst = 0.0;
  for (int64_t r = 0; r < got.rows; ++r)
    for (int64_t c = 0; c < got.cols; ++c)
      worst = std::max(worst, std::abs(static_cast<double>(got.at(r, c)) - want[static_cast<size_t>(r)][static_cast<size_t>(c)]));
  return worst;
}

TEST(V41Forward, LogitsMatchTheReference) {
  const V41Weights w = load_v41_weights(kDir);
  const Expected e = load_expected();
  // The reference wrote the multipliers it hashed with; with numpy they are make_engram_layout's.
  std::vector<EngramLayerLayout> fresh = make_engram_layout(w.config.engram);
  for (size_t i = 0; i < fresh.size(); ++i) EXPECT_EQ(fresh[i].multipliers, w.engram_layout[i].multipliers) << "layer " << i;
  const Mat logits = v41_logits_cpu(w.config, w, e.tokens);
  ASSERT_EQ(logits.rows, static_cast<int64_t>(e.tokens.size()));
  ASSERT_EQ(logits.cols, w.config.vocab_size);
  ASSERT_EQ(e.logits.size(), e.tokens.size());
  const double err = max_abs_diff(logits, e.logits);
  std::printf("v41 forward: max abs error %.3e over %lld x %lld logits\n", err, static_cast<long long>(logits.rows),
              static_cast<long long>(logits.cols));
  EXPECT_LE(err, 1e-4);
}

TEST(V41Forward, PerturbedWeightChangesTheLogits) {
  // The comparison can fail: a small change to one late-layer weight moves the logits far beyond the tolerance.
  V41Weights w = load_v41_weights(kDir);
  const Expected e = load_expected();
  Mat& wo_b = w.tensors.at("layers.6.attn.wo_b.weight");
  for (float& v : wo_b.v) v *= 1.1f;
  const Mat logits = v41_logits_cpu(w.config, w, e.tokens);
  EXPECT_GT(max_abs_diff(logits, e.logits), 0.1);  // the reference moves by 1.5
}

TEST(V41Forward, RejectsATokenOutsideTheVocabulary) {
  const V41Weights w = load_v41_weights(kDir);
  const std::vector<int32_t> bad = {1, 2, static_cast<int32_t>(w.config.vocab_size)};
  try {
    v41_logits_cpu(w.config, w, bad);
    FAIL() << "expected an exception";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("outside the vocabulary"), std::string::npos) << err.what();
  }
  EXPECT_THROW(v41_logits_cpu(w.config, w, {}), Error);
}

}  // namespace
}  // namespace strata::model::v41
