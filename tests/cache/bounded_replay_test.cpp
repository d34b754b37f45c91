// Bounded replay at the model seam (Model::restore_prefix_for_replay): a state restored from token blocks alone
// stands before the prefix's end, and a forward of the missing tokens rebuilds its sliding window and compressor
// rings. Replaying the whole prefix gives a cold prefill's logits bit for bit; replaying less never reads the rings
// below the window floor, and never writes the restored entries (whose blocks other sequences may share).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "cache/small_block_model.h"
#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "test_util.h"

namespace strata::cache {
namespace {

using model::Model;
using model::SequenceState;
using test_models::small_block_model;

constexpr int64_t kBlocks = 4;  // the restored prefix: 4 blocks of 16 tokens

struct Prefix {
  std::vector<int32_t> tokens;           // prefix + suffix
  std::vector<std::vector<float>> host;  // the prefix's blocks as a cold prefill wrote them
  Mat cold;                              // every position's logits, cold
};

Prefix cold_prefix(int64_t suffix) {
  const model::v4::Model& m = small_block_model();
  const int64_t B = m.state_layout().block_tokens;
  Prefix p;
  p.tokens = test::token_ids(kBlocks * B + suffix, 17);
  SequenceState st = m.new_sequence();
  p.cold = m.forward(p.tokens, st, true);
  for (int64_t b = 0; b < kBlocks; ++b) {
    p.host.emplace_back(static_cast<size_t>(m.state_layout().block_floats));
    m.read_block(st, b, p.host.back().data());
  }
  return p;
}

std::vector<Model::PrefixBlock> host_blocks(const Prefix& p) {
  std::vector<Model::PrefixBlock> blocks;
  for (const auto& h : p.host) blocks.push_back({-1, h.data()});
  return blocks;
}

// Replays tokens [from, end of prefix) then runs the suffix; the logits of every position from `from` on.
Mat replay(const Prefix& p, int64_t from, SequenceState& st) {
  const model::v4::Model& m = small_block_model();
  m.restore_prefix_for_replay(host_blocks(p), from, st);
  EXPECT_TRUE(st.replaying());
  EXPECT_EQ(st.num_tokens, from);
  const std::vector<int32_t> rest(p.tokens.begin() + from, p.tokens.end());
  Mat out = m.forward(rest, st, true);
  EXPECT_FALSE(st.replaying());
  EXPECT_EQ(st.window_floor, 0);
  return out;
}

::testing::AssertionResult same_rows(const Mat& a, int64_t a_row, const Mat& b, int64_t b_row, int64_t rows) {
  if (a.cols != b.cols) return ::testing::AssertionFailure() << "widths differ";
  return test::same_finite_bits(a.row(a_row), b.row(b_row), static_cast<size_t>(rows * a.cols));
}

::testing::AssertionResult fails_with(const std::function<void()>& fn, const std::string& part) {
  const std::string message = test::error_of(fn);
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "error '" << message << "' lacks '" << part << "'";
}

TEST(BoundedReplay, ReplayingTheWholePrefixGivesColdLogitsBitForBit) {
  const model::v4::Model& m = small_block_model();
  const Prefix p = cold_prefix(7);
  SequenceState st = m.new_sequence();
  const Mat out = replay(p, 0, st);
  // The restored entries equal those the replay would compute, and the window starts at 0 anyway.
  EXPECT_TRUE(same_rows(out, 0, p.cold, 0, p.cold.rows));
  EXPECT_EQ(st.num_tokens, static_cast<int64_t>(p.tokens.size()));
}

TEST(BoundedReplay, AShorterReplayNeverReadsTheRingsBelowItsFloorNorWritesTheRestoredEntries) {
  const model::v4::Model& m = small_block_model();
  const int64_t B = m.state_layout().block_tokens, window = m.config().sliding_window;
  const Prefix p = cold_prefix(9);
  const int64_t from = kBlocks * B - window - 3;
  // One state fresh, one whose rings hold another sequence's rows: the rows below the floor must not matter.
  SequenceState fresh = m.new_sequence(), used = m.new_sequence();
  m.forward(test::token_ids(kBlocks * B + 5, 99), used, false);
  const Mat a = replay(p, from, fresh), b = replay(p, from, used);
  EXPECT_TRUE(same_rows(a, 0, b, 0, a.rows));
  // An approximation: the replayed tokens saw no window before `from`, so the logits are close, not equal.
  const int64_t first_suffix = kBlocks * B - from;
  double most = 0;
  for (int64_t r = first_suffix; r < a.rows; ++r)
    for (int64_t c = 0; c < a.cols; ++c)
      most = std::max(most, std::abs(static_cast<double>(a.at(r, c)) - p.cold.at(from + r, c)));
  EXPECT_GT(most, 0.0) << "the replay is exact: the window floor is not applied";
  // The prefix's blocks are as the cold prefill left them.
  std::vector<float> now(static_cast<size_t>(m.state_layout().block_floats));
  for (int64_t blk = 0; blk < kBlocks; ++blk) {
    m.read_block(fresh, blk, now.data());
    EXPECT_TRUE(test::same_finite_bits(now.data(), p.host[static_cast<size_t>(blk)].data(), now.size())) << blk;
  }
}

TEST(BoundedReplay, AReplayThatLeavesTooFewTokensOrAnUnfinishedOneIsRefused) {
  const model::v4::Model& m = small_block_model();
  const int64_t B = m.state_layout().block_tokens, window = m.config().sliding_window;
  const Prefix p = cold_prefix(1);
  SequenceState st = m.new_sequence();
  EXPECT_TRUE(fails_with([&] { m.restore_prefix_for_replay(host_blocks(p), kBlocks * B - window + 1, st); }, "need the last 16 tokens replayed"));
  EXPECT_EQ(st.num_tokens, 0);
  m.restore_prefix_for_replay(host_blocks(p), kBlocks * B - window - 1, st);
  // Until the replay reaches the prefix's end, the state has no rows to snapshot, copy or roll back to.
  SequenceState other = m.new_sequence();
  EXPECT_TRUE(fails_with([&] { m.snapshot(st); }, "rebuilding its window by bounded replay"));
  EXPECT_TRUE(fails_with([&] { m.copy_state(st, other); }, "rebuilding its window by bounded replay"));
  EXPECT_TRUE(fails_with([&] { m.rollback(st, st.num_tokens); }, "rebuilding its window by bounded replay"));
  const std::vector<int32_t> rest(p.tokens.begin() + st.num_tokens, p.tokens.begin() + kBlocks * B);
  m.forward(rest, st, false);
  EXPECT_NO_THROW(m.snapshot(st));
}

}  // namespace
}  // namespace strata::cache
