// Stage, commit, roll back (Model::rollback, state_layout.h): a state that ran tokens and dropped them continues
// bit for bit as one that never ran them — in one step (speculative verification) or over several, across CSA, HCA,
// sliding-window and token-block boundaries, in a lone state and in pool slots, and into a shared block (copy on
// write, the other sequence untouched).
#include <gtest/gtest.h>

#include "model/state_pool.h"
#include "rollback_scenario.h"
#include "tiny_model.h"

namespace strata {
namespace {

using model::SequenceState;
using model::StatePool;

constexpr int64_t kMaxRollback = 5;
#ifdef STRATA_SANITIZED
constexpr size_t kStride = 3;  // under the sanitizers, a spread-out third of the cases
#else
constexpr size_t kStride = 1;
#endif

class StateRollback : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = test::tiny_model("state_rollback", 31, kMaxRollback).release(); }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  static model::v4::Model* model_;
};
model::v4::Model* StateRollback::model_ = nullptr;

std::string describe(const test::RollbackCase& c) {
  return "prefix " + std::to_string(c.prefix.size()) + ", staged " + std::to_string(c.staged.size()) + ", kept " +
         std::to_string(c.keep) + (c.one_step ? ", one step" : ", a step each");
}

TEST_F(StateRollback, DroppedTokensLeaveNoTraceInLoneStates) {
  const auto cases = test::rollback_cases(model_->config().vocab_size, kMaxRollback);
  ASSERT_EQ(cases.size(), 42u);
  for (size_t i = 0; i < cases.size(); i += kStride) {
    const test::RollbackCase& c = cases[i];
    std::vector<SequenceState> states;
    states.reserve(2);
    const test::RollbackResult r = test::run_rollback_case(*model_, c, [&] {
      states.push_back(model_->new_sequence());
      return &states.back();
    });
    EXPECT_EQ(r.differing_steps, 0) << describe(c);
  }
}

TEST_F(StateRollback, DroppedTokensLeaveNoTraceInPoolSlotsAndFreeTheirBlocks) {
  StatePool pool(*model_, {2, 16});
  const auto cases = test::rollback_cases(model_->config().vocab_size, kMaxRollback);
  for (size_t i = 0; i < cases.size(); i += 3 * kStride) {  // a third of them: the lone states' test runs all
    const test::RollbackCase& c = cases[i];
    const test::RollbackResult r = test::run_rollback_case(*model_, c, [&] { return pool.acquire(); });
    EXPECT_EQ(r.differing_steps, 0) << describe(c);
    // Both slots hold the same number of tokens now, hence the same number of blocks.
    EXPECT_EQ(pool.slot(0).blocks.size(), pool.slot(1).blocks.size()) << describe(c);
    EXPECT_EQ(pool.used_blocks(), static_cast<int64_t>(2 * pool.slot(0).blocks.size())) << describe(c);
    pool.release_slot(0);
    pool.release_slot(1);
    EXPECT_EQ(pool.used_blocks(), 0);
  }
}

TEST_F(StateRollback, IntoASharedBlockCopiesItAndLeavesTheOtherSequenceUntouched) {
  const int64_t vocab = model_->config().vocab_size;
  auto ids = [&](int64_t n, int64_t salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 29 + salt) % vocab);
    return t;
  };
  StatePool pool(*model_, {3, 16});
  SequenceState& source = *pool.acquire();
  model_->forward(ids(256, 1), source, false);  // two full blocks
  SequenceState& fork = *pool.acquire();
  ASSERT_TRUE(model_->fork_state(source, fork));
  ASSERT_EQ(fork.blocks, source.blocks);
  EXPECT_EQ(pool.blocks().references(source.blocks[1]), 2);
  // The fork runs three tokens (a third block), then drops five: back inside the shared second block.
  model_->forward(ids(3, 2), fork, true);
  model_->rollback(fork, 254);
  ASSERT_EQ(fork.blocks.size(), 2u);
  EXPECT_EQ(fork.blocks[0], source.blocks[0]);
  EXPECT_NE(fork.blocks[1], source.blocks[1]) << "the partial block it goes on writing is its own copy";
  EXPECT_EQ(pool.blocks().references(source.blocks[1]), 1);

  // Both continue as sequences that never shared anything.
  SequenceState& alone = *pool.acquire();
  model_->forward(ids(256, 1), alone, false);
  model_->rollback(alone, 254);  // the same 254-token prefix as the fork's, without the detour
  for (int step = 0; step < 12; ++step) {
    const std::vector<int32_t> t = ids(1, 100 + step);
    const Mat f = model_->forward(t, fork, false), a = model_->forward(t, alone, false);
    EXPECT_TRUE(test::same_bits(f, a)) << "fork, step " << step;
  }
  SequenceState lone = model_->new_sequence();
  model_->forward(ids(256, 1), lone, false);
  for (int step = 0; step < 12; ++step) {
    const std::vector<int32_t> t = ids(1, 300 + step);
    EXPECT_TRUE(test::same_bits(model_->forward(t, source, false), model_->forward(t, lone, false)))
        << "source, step " << step;
  }
  pool.release_slot(0);
  pool.release_slot(1);
  pool.release_slot(2);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST_F(StateRollback, RefusesToDropMoreThanTheRingsKeep) {
  SequenceState s = model_->new_sequence();
  model_->forward({1, 2, 3, 4, 5, 6, 7, 8}, s, false);
  try {
    model_->rollback(s, 8 - kMaxRollback - 1);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_rollback"), std::string::npos) << e.what();
  }
  try {
    model_->rollback(s, 9);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot keep 9 tokens of a sequence of 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.num_tokens, 8);
  model_->rollback(s, 8 - kMaxRollback);
  EXPECT_EQ(s.num_tokens, 3);
}

}  // namespace
}  // namespace strata
