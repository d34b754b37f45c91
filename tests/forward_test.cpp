// The CPU forward against transformers (fixtures made by tests/reference/parity.py on the GPU machine), and the
// incremental-state contract: any prefill chunking followed by decode gives the logits of one full forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/sampling.h"
#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"

namespace strata {
namespace {

using model::v4::Model;
using model::SequenceState;

constexpr double kTolerance = 1e-4;  // max|Δ| / max|ref| per row, as in parity.py

struct Expected {
  std::vector<int32_t> prompt;
  std::vector<float> prompt_logits, gen_logits;
  std::vector<int64_t> gen_tokens;
};

Expected read_expected(const std::string& dir) {
  const auto store = model::TensorStore::open(dir + "/expected.safetensors");
  Expected e;
  for (int64_t id : test::int64s_of(*store.find("prompt_ids"))) e.prompt.push_back(static_cast<int32_t>(id));
  e.prompt_logits = test::floats_of(*store.find("prompt_logits"));
  e.gen_logits = test::floats_of(*store.find("gen_logits"));
  e.gen_tokens = test::int64s_of(*store.find("gen_tokens"));
  return e;
}

int32_t argmax(const float* x, int64_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// The worst row's max|Δ|/max|ref| over `rows` rows of `vocab` logits (+inf when a row holds a NaN or infinity).
double worst_row_error(const float* got, const float* want, int64_t rows, int64_t vocab) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) worst = std::max(worst, test::row_rel_error(got + r * vocab, want + r * vocab, vocab));
  return worst;
}

// transformers' fp32 eager logits for a 300-token prompt and 16 greedy steps; the checkpoint is the one
// save_pretrained wrote (bf16 copy of bf16-exact weights), so this also checks its tensor names and config.json.
void check_fixture(const std::string& name) {
  const std::string dir = test::fixture(name);
  const Model m = model::v4::load_model(dir);
  const Expected e = read_expected(dir);
  const int64_t vocab = m.config().vocab_size, n = static_cast<int64_t>(e.prompt.size());
  ASSERT_EQ(e.prompt_logits.size(), static_cast<size_t>(n * vocab));

  SequenceState st = m.new_sequence();
  Mat logits = m.forward(e.prompt, st, true);
  EXPECT_LE(worst_row_error(logits.v.data(), e.prompt_logits.data(), n, vocab), kTolerance) << name << ": prompt logits";

  const float* last = logits.row(n - 1);
  Mat step;
  for (size_t i = 0; i < e.gen_tokens.size(); ++i) {
    EXPECT_LE(test::row_rel_error(last, e.gen_logits.data() + i * vocab, vocab), kTolerance) << name << " step " << i;
    const int32_t token = argmax(last, vocab);
    ASSERT_EQ(token, e.gen_tokens[i]) << name << ": greedy token " << i;
    step = m.forward({token}, st, false);
    last = step.row(0);
  }
}

TEST(Forward, MatchesTransformersAllLayerTypesHc4) { check_fixture("a_hc4"); }
TEST(Forward, MatchesTransformersShortWindowSmallRates) { check_fixture("c_short"); }

// The parity bar above must be able to fail on numbers that are not numbers: the fixture's own logits pass it
// exactly, and the same logits with one NaN (or infinite) element in one row fail it — also when that row is the
// only bad one among 300, and whether the poison is in what we computed or in the reference.
TEST(Forward, ParityBarFailsOnANanOrInfiniteRow) {
  const Expected e = read_expected(test::fixture("c_short"));
  const int64_t rows = static_cast<int64_t>(e.prompt.size());
  const int64_t vocab = static_cast<int64_t>(e.prompt_logits.size()) / rows;
  ASSERT_GT(rows, 2);
  EXPECT_EQ(worst_row_error(e.prompt_logits.data(), e.prompt_logits.data(), rows, vocab), 0.0);
  for (const float poison : {NAN, INFINITY, -INFINITY}) {
    std::vector<float> bad = e.prompt_logits;
    bad[static_cast<size_t>(rows / 2 * vocab + 3)] = poison;
    EXPECT_FALSE(worst_row_error(bad.data(), e.prompt_logits.data(), rows, vocab) <= kTolerance) << poison;
    EXPECT_FALSE(worst_row_error(e.prompt_logits.data(), bad.data(), rows, vocab) <= kTolerance) << poison;
  }
  // A whole row of NaN, the case the old comparison scored 0 (std::max(x, NaN) keeps x).
  std::vector<float> nan_row = e.prompt_logits;
  std::fill_n(nan_row.begin() + vocab, vocab, NAN);
  EXPECT_FALSE(worst_row_error(nan_row.data(), e.prompt_logits.data(), rows, vocab) <= kTolerance);
}

// Logits of `tokens` when the prompt is fed in chunks of the given sizes (cycled), then the rest one by one.
Mat run_chunked(const Model& m, const std::vector<int32_t>& tokens, const std::vector<int64_t>& chunks,
                int64_t prefill_len) {
  SequenceState st = m.new_sequence();
  Mat all(static_cast<int64_t>(tokens.size()), m.config().vocab_size);
  int64_t at = 0;
  for (size_t c = 0; at < prefill_len; ++c) {
    const int64_t len = std::min(chunks[c % chunks.size()], prefill_len - at);
    const Mat out = m.forward(std::vector<int32_t>(tokens.begin() + at, tokens.begin() + at + len), st, true);
    std::copy(out.v.begin(), out.v.end(), all.row(at));
    at += len;
  }
  for (; at < static_cast<int64_t>(tokens.size()); ++at) {
    const Mat out = m.forward({tokens[at]}, st, false);
    std::copy(out.v.begin(), out.v.end(), all.row(at));
  }
  EXPECT_EQ(st.num_tokens, static_cast<int64_t>(tokens.size()));
  return all;
}

class ChunkingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::temp_dir("chunking");
    model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir_, 3, DType::F32);
  }
  static std::string dir_;
};
std::string ChunkingTest::dir_;

// Lengths cross the sliding window (128), every CSA window (4) and the HCA window (128) several times; the chunk
// sizes are co-prime with the windows so chunk edges land at every offset. Per-row results do not depend on how
// tokens are batched, so the logits are bit-identical, not merely close.
TEST_F(ChunkingTest, AnyPrefillChunkingThenDecodeEqualsOneForward) {
  const Model m = model::v4::load_model(dir_);
  std::vector<int32_t> tokens(300);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 13) % 512);
  const Mat whole = run_chunked(m, tokens, {static_cast<int64_t>(tokens.size())}, static_cast<int64_t>(tokens.size()));
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> schedules = {
      {{1}, 300}, {{3}, 300}, {{4}, 300}, {{7, 64, 129}, 300}, {{127}, 257}, {{128}, 256}, {{129}, 129}, {{5}, 1}};
  for (const auto& [chunks, prefill] : schedules) {
    const Mat got = run_chunked(m, tokens, chunks, prefill);
    for (int64_t r = 0; r < whole.rows; ++r)
      ASSERT_TRUE(test::same_finite_bits(got.row(r), whole.row(r), static_cast<size_t>(whole.cols)))
          << "row " << r << " differs with chunk " << chunks[0] << " and prefill " << prefill;
  }
}

// Sequences at different positions — some prefilling, some decoding — batched into one step give exactly the
// logits each gets alone: batching never changes results.
TEST_F(ChunkingTest, BatchedSequencesMatchSoloRunsBitForBit) {
  const Model m = model::v4::load_model(dir_);
  const int n_seq = 4;
  auto token = [](int seq, int64_t i) { return static_cast<int32_t>((i * 131 + seq * 977 + 5) % 512); };
  std::vector<SequenceState> solo(n_seq), batched(n_seq);
  for (int q = 0; q < n_seq; ++q) solo[q] = m.new_sequence(), batched[q] = m.new_sequence();
  // Step schedule per sequence: (tokens this step); sequences start at different times and prefill differently.
  const std::vector<std::vector<int64_t>> steps = {{130, 1, 1, 5, 1, 1}, {1, 1, 1, 1, 1, 1}, {7, 64, 1, 1, 129, 1},
                                                   {200, 1, 3, 1, 1, 1}};
  std::vector<int64_t> done(n_seq, 0);
  for (size_t step = 0; step < steps[0].size(); ++step) {
    std::vector<model::SequenceChunk> chunks;
    std::vector<Mat> expected;
    for (int q = 0; q < n_seq; ++q) {
      std::vector<int32_t> toks;
      for (int64_t i = 0; i < steps[q][step]; ++i) toks.push_back(token(q, done[q] + i));
      done[q] += steps[q][step];
      const bool all = q % 2 == 0;
      expected.push_back(m.forward(toks, solo[q], all));
      chunks.push_back({toks, &batched[q], all});
    }
    const std::vector<Mat> got = m.forward_batch(chunks);
    for (int q = 0; q < n_seq; ++q) {
      ASSERT_EQ(got[q].v.size(), expected[q].v.size());
      ASSERT_TRUE(test::same_finite_bits(got[q].v.data(), expected[q].v.data(), got[q].v.size()))
          << "sequence " << q << " step " << step;
    }
  }
}

// The sampling stage where the logits are (model/logits_stage.h): greedy and random picks give what the CPU
// reference ops give on the logits a chunk would otherwise take home, penalties change a row before its pick, raw
// rows come home unprocessed beside picked ones, and a row without a request costs nothing to bring home.
TEST_F(ChunkingTest, SamplingStagePicksWhatTheReferenceOpsPickOnTheSameLogits) {
  const Model m = model::v4::load_model(dir_);
  std::vector<SequenceState> solo(4), batched(4);
  for (int q = 0; q < 4; ++q) solo[q] = m.new_sequence(), batched[q] = m.new_sequence();
  for (int step = 0; step < 4; ++step) {
    std::vector<model::SequenceChunk> chunks;
    std::vector<Mat> expected;
    for (int q = 0; q < 4; ++q) {
      std::vector<int32_t> toks(step == 0 ? 9 + q * 60 : 1);
      for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 37 + q * 101 + step * 7 + 3) % 512);
      expected.push_back(m.forward(toks, solo[q], false));
      chunks.push_back({toks, &batched[q], false});
    }
    // Row 0: greedy; row 1: raw home, nothing else; row 2: penalised and sampled, its raw row home too; row 3: none.
    model::LogitsStage stage;
    stage.rows.push_back({0, false, {}, model::TokenPick{}, nullptr});
    stage.rows.push_back({1, true, {}, std::nullopt, nullptr});
    model::RowPenalties pen;
    pen.repetition = 1.3f;
    pen.seen = {1, 5, 77, 300};
    pen.subtract = {{5, 0.75f}, {9, -2.0f}};
    const model::TokenPick draw{0.8, 40, 0.9, 0.02, 0.37 + 0.1 * step};
    stage.rows.push_back({2, true, pen, draw, nullptr});
    const model::StepLogits got = m.run_step(chunks, stage);
    ASSERT_EQ(got.picks.size(), 3u);
    ASSERT_EQ(got.raw.rows, 2);
    const float* r0 = expected[0].row(0);
    EXPECT_EQ(got.picks[0], static_cast<int32_t>(std::max_element(r0, r0 + expected[0].cols) - r0)) << "step " << step;
    EXPECT_EQ(got.picks[1], -1);
    EXPECT_TRUE(test::same_finite_bits(got.raw.row(0), expected[1].row(0), expected[1].v.size())) << "step " << step;
    EXPECT_TRUE(test::same_finite_bits(got.raw.row(1), expected[2].row(0), expected[2].v.size())) << "step " << step;
    std::vector<float> work = expected[2].v;
    cpu::apply_penalties(work, pen);
    EXPECT_EQ(got.picks[2], cpu::pick_token(work, draw)) << "step " << step;
  }
}

TEST_F(ChunkingTest, SamplingStageRejectsMalformedRequests) {
  const Model m = model::v4::load_model(dir_);
  auto expect_error = [&](const model::LogitsStage& stage, const std::string& what) {
    SequenceState st = m.new_sequence();
    std::vector<model::SequenceChunk> chunks{{{1, 2}, &st, false}};
    try {
      m.run_step(chunks, stage);
      FAIL() << "expected an error about " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error({{{1, true, {}, std::nullopt, nullptr}}}, "outside the step's 1 rows");
  expect_error({{{0, false, {}, model::TokenPick{0.7, 0, 1.0, 0.0, 1.0}, nullptr}}}, "with draw 1");
  model::RowPenalties bad;
  bad.subtract = {{512, 1.0f}};
  expect_error({{{0, false, bad, model::TokenPick{}, nullptr}}}, "token id 512");
}

TEST_F(ChunkingTest, RejectsTokensOutsideTheVocabulary) {
  const Model m = model::v4::load_model(dir_);
  SequenceState st = m.new_sequence();
  try {
    m.forward({1, 512}, st, false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 512"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
