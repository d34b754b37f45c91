// Model::copy_state: a forked sequence continues bit-identically to the one it was copied from, whatever arena
// it lives in, and a fork into an arena without room fails cleanly.
#include <gtest/gtest.h>

#include <vector>

#include "model/state_pool.h"
#include "tiny_model.h"

namespace strata {
namespace {

using model::SequenceState;

std::vector<int32_t> tokens(int64_t n, int64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31 + salt * 7 + 3) % 500);
  return t;
}

TEST(CopyState, ForkContinuesBitIdentically) {
  const auto m = test::tiny_model("copy_state", 11);
  // 301 tokens: past the 128-token window, 75 closed CSA windows with one token pending, two HCA entries.
  SequenceState original = m->new_sequence();
  m->forward(tokens(301, 1), original, false);
  model::StatePoolLimits limits;
  limits.max_sequences = 2;
  limits.blocks = 2 * m->blocks_for_tokens(400);
  model::StatePool pool(*m, limits);
  SequenceState* fork = pool.acquire();
  ASSERT_TRUE(m->copy_state(original, *fork));
  EXPECT_EQ(fork->num_tokens, 301);
  for (int step = 0; step < 40; ++step) {  // crosses CSA and window boundaries again
    const std::vector<int32_t> next = tokens(1, 100 + step);
    const Mat a = m->forward(next, original, false), b = m->forward(next, *fork, false);
    ASSERT_EQ(a.v, b.v) << "step " << step;
  }
  // The copy owns its blocks: releasing it leaves the original intact.
  pool.release(fork);
  EXPECT_EQ(pool.used_blocks(), 0);
  EXPECT_EQ(m->forward(tokens(1, 7), original, false).v.size(), static_cast<size_t>(m->config().vocab_size));
}

TEST(CopyState, FailsWithoutPagesAndLeavesTheTargetEmpty) {
  const auto m = test::tiny_model("copy_state_full", 12);
  SequenceState original = m->new_sequence();
  m->forward(tokens(300, 2), original, false);
  model::StatePoolLimits limits;
  limits.max_sequences = 1;
  limits.blocks = 1;  // fewer than 300 tokens need (three)
  model::StatePool pool(*m, limits);
  SequenceState* fork = pool.acquire();
  EXPECT_FALSE(m->copy_state(original, *fork));
  EXPECT_EQ(fork->num_tokens, 0);
  EXPECT_EQ(pool.used_blocks(), 0);
}

}  // namespace
}  // namespace strata
