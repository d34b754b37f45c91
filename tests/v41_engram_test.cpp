// DeepSeek-V4.1's Engram (src/model/deepseek_v41/engram.h) against the PyTorch reference (tests/gpu/v41_reference.py,
// via tests/reference/v41_engram_fixture.py → tests/fixtures/v41/engram.json) and NumPy's generator.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/deepseek_v41/engram.h"
#include "model/deepseek_v41/numpy_random.h"
#include "test_util.h"

namespace strata::model::v41 {
namespace {

nlohmann::json fixture() {
  std::ifstream in(test::fixture("v41/engram.json"));
  if (!in) throw std::runtime_error("no fixture v41/engram.json");
  return nlohmann::json::parse(in);
}

Mat mat_of(const nlohmann::json& v, int64_t rows, int64_t cols) {
  Mat m(rows, cols);
  const auto values = v.get<std::vector<float>>();
  if (values.size() != m.v.size()) throw std::runtime_error("fixture matrix of the wrong size");
  m.v = values;
  return m;
}

// What NumPy 1.24 printed for np.random.default_rng(seed).integers(low, high, size=n, dtype=np.int64): both of
// Lemire's paths (64-bit ranges, and 32-bit halves of one 64-bit draw), a seed of two 32-bit words, a full range.
TEST(NumpyDefaultRng, DrawsWhatNumpyDraws) {
  struct Case {
    uint64_t seed;
    int64_t low, high;
    std::vector<int64_t> want;
  };
  const std::vector<Case> cases = {
      {10007, 0, 46539438283891, {38316048023122, 2419938046656, 17979836159674, 36993668729195}},
      {140098, 0, 46539438283891, {33858405369630, 25755403400457, 15460673601360, 41309613242795}},
      {12345, 0, 10, {6, 2, 7}},
      {42, 0, 10, {0, 7, 6, 4, 4, 8, 0}},
      {7, -5, int64_t{1} << 40, {687299734000, 986497006766, 852875435922, 247617924049, 330036320522}},
      {(uint64_t{1} << 40) + 3, 0, 1000, {733, 773, 444, 995, 380, 473}},
      {0, 0, int64_t{1} << 32, {3653403231, 2735729615, 2195314465}},
      {99, 0, INT64_MAX, {4667309173420421451, 5212050354861684882, 4721591347843348228}},
  };
  for (const Case& c : cases) {
    NumpyDefaultRng rng(c.seed);
    EXPECT_EQ(rng.integers(c.low, c.high, static_cast<int64_t>(c.want.size())), c.want) << "seed " << c.seed;
  }
  NumpyDefaultRng raw(12345);  // bit_generator.random_raw(2)
  EXPECT_EQ(raw.next_uint64(), 4193609425186963869ULL);
  EXPECT_EQ(raw.next_uint64(), 5843160025838961886ULL);
  EXPECT_THROW(NumpyDefaultRng(1).integers(5, 5, 1), std::exception);
}

TEST(Engram, TheReleaseLayoutIsTheCheckpointsTables) {
  const nlohmann::json f = fixture()["release"];
  EngramSettings s;
  s.layer_ids = {1, 14};
  const std::vector<EngramLayerLayout> layout = make_engram_layout(s);
  ASSERT_EQ(layout.size(), 2u);
  // engram_num_embeddings of the release config: the tables' rows.
  EXPECT_EQ(layout[0].rows, 384006168);
  EXPECT_EQ(layout[1].rows, 384016682);
  EXPECT_EQ(layout[0].primes[0][0], 16000057);
  EXPECT_EQ(layout[1].primes[2][7], 16000889);
  EXPECT_EQ(layout[0].offsets.size(), 24u);
  EXPECT_EQ(layout[0].offsets[1], 16000057);
  EXPECT_EQ(layout[1].offsets[23], 368015793);
  for (size_t l = 0; l < 2; ++l) EXPECT_EQ(layout[l].multipliers, f["multipliers"][l].get<std::vector<int64_t>>()) << l;
  // Every position's 24 rows per layer, a dead token and the positions whose n-grams reach it included.
  const auto history = f["history"].get<std::vector<int64_t>>();
  const int64_t pad = f["pad_code"];
  for (size_t pos = 0; pos < history.size(); ++pos)
    for (size_t l = 0; l < 2; ++l)
      EXPECT_EQ(engram_row_ids(layout[l], history, static_cast<int64_t>(pos), pad),
                f["ids"][pos][l].get<std::vector<int64_t>>())
          << "position " << pos << " layer " << layout[l].layer;
}

TEST(Engram, InjectionMatchesTheReference) {
  const nlohmann::json f = fixture()["inject"];
  EngramSettings s;
  s.layer_ids = {f["layer"].get<int64_t>()};
  s.vocab_size = f["vocab_size"];
  s.max_ngram = f["max_ngram"];
  s.heads = f["heads"];
  s.compressed_vocab = f["compressed_vocab"];
  s.head_dim = f["head_dim"];
  const EngramLayerLayout layer = make_engram_layout(s).at(0);
  const auto tokens = f["tokens"].get<std::vector<int64_t>>();
  for (size_t pos = 0; pos < tokens.size(); ++pos)
    EXPECT_EQ(engram_row_ids(layer, tokens, static_cast<int64_t>(pos), f["pad_code"]),
              f["ids"][pos].get<std::vector<int64_t>>()) << pos;
  const int64_t hc = f["hc"], d = f["d"], n = static_cast<int64_t>(tokens.size());
  const int64_t width = static_cast<int64_t>(f["ids"][0].size()) * s.head_dim;
  Mat streams = mat_of(f["streams"], n, hc * d);
  const Mat want = mat_of(f["expected"], n, hc * d);
  engram_inject(streams, mat_of(f["rows_of"], n, width), mat_of(f["wkv"], (hc + 1) * d, width),
                mat_of(f["qk"], hc, d), hc, f["eps"].get<float>());
  double worst = 0, changed = 0;
  for (size_t i = 0; i < want.v.size(); ++i) worst = std::max(worst, std::fabs(double{streams.v[i]} - want.v[i]));
  const Mat before = mat_of(f["streams"], n, hc * d);
  for (size_t i = 0; i < want.v.size(); ++i) changed = std::max(changed, std::fabs(double{want.v[i]} - before.v[i]));
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(changed, 0.1);  // the injection does something the check can see
  EXPECT_THROW(engram_inject(streams, Mat(n, width), Mat(3, width), Mat(hc, d), hc, 1e-20f), std::exception);
}

TEST(Engram, BadSettingsAreNamed) {
  EngramSettings s;
  s.layer_ids = {1};
  s.max_ngram = 1;
  EXPECT_THROW(make_engram_layout(s), std::exception);
  s.max_ngram = 4;
  s.layer_ids = {-1};
  EXPECT_THROW(make_engram_layout(s), std::exception);
  s.layer_ids = {1};
  s.vocab_size = 50;
  const EngramLayerLayout l = make_engram_layout(s).at(0);
  const std::vector<int64_t> history = {1, 2};
  EXPECT_THROW(engram_row_ids(l, history, 2, 2), std::exception);
  const std::vector<int64_t> outside = {1, 99092};
  EXPECT_THROW(engram_row_ids(l, outside, 1, 2), std::exception);
  EXPECT_THROW(engram_row_ids(l, history, 1, 99092), std::exception);
}

}  // namespace
}  // namespace strata::model::v41
