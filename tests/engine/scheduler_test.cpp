// Scheduler decisions: budgets, decode-first order, chunking, slot limits, preemption. Each planned step is run
// through the model (so the state, and with it the page demand, advances as in serving) without sampling.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include "tiny_model.h"

namespace strata::engine {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = test::tiny_model("scheduler", 2).release(); }
  static void TearDownTestSuite() { delete model_; }

  static Sequence make(uint64_t id, int64_t prompt_len) {
    Sequence s;
    s.id = id;
    s.prompt.assign(static_cast<size_t>(prompt_len), 3);
    return s;
  }
  // What the engine does with a plan: run it, advance, and give each sampling sequence one new token.
  static void run(Scheduler& sch, model::StatePool& pool, const StepPlan& plan, std::vector<Sequence*> seqs) {
    std::vector<model::SequenceChunk> chunks;
    for (const ScheduledSpan& c : plan.spans) chunks.push_back({c.tokens, &pool.slot(c.slot), false});
    if (!chunks.empty()) model_->forward_batch(chunks);
    StepOutput out;
    out.spans.resize(plan.spans.size());  // no drafts: every span keeps its tokens
    sch.commit(plan, out);
    for (const ScheduledSpan& c : plan.spans)
      if (c.samples)
        for (Sequence* s : seqs)
          if (s->id == c.sequence_id) s->output.push_back(4);
  }
  static model::v4::Model* model_;
};
model::v4::Model* SchedulerTest::model_ = nullptr;

TEST_F(SchedulerTest, ChunksPrefillsUnderTheBudgetAndPutsDecodesFirst) {
  model::StatePool pool(*model_, {4, 64});
  Scheduler sch({4, 32}, pool);
  Sequence a = make(0, 10), b = make(1, 100);
  sch.add(&a);
  sch.add(&b);
  StepPlan p1 = sch.plan_step();
  ASSERT_EQ(p1.spans.size(), 2u);
  EXPECT_EQ(p1.spans[0].tokens.size(), 10u);
  EXPECT_TRUE(p1.spans[0].samples);
  EXPECT_EQ(p1.spans[1].tokens.size(), 22u);  // the rest of the 32-token budget
  EXPECT_FALSE(p1.spans[1].samples);
  run(sch, pool, p1, {&a, &b});
  StepPlan p2 = sch.plan_step();  // a decodes (1 token) first, b continues with 31
  ASSERT_EQ(p2.spans.size(), 2u);
  EXPECT_EQ(p2.spans[0].sequence_id, a.id);
  EXPECT_EQ(p2.spans[0].tokens.size(), 1u);
  EXPECT_EQ(p2.spans[1].tokens.size(), 31u);
  EXPECT_EQ(p2.num_tokens(), 32);
  run(sch, pool, p2, {&a, &b});
  int64_t steps = 2;
  while (b.num_computed < 100) {
    const StepPlan p = sch.plan_step();
    EXPECT_LE(p.num_tokens(), 32);
    run(sch, pool, p, {&a, &b});
    ++steps;
  }
  EXPECT_EQ(steps, 4);  // 22 + 31 + 31 + 16 = 100
}

TEST_F(SchedulerTest, RespectsSlotsAndSequenceLimit) {
  model::StatePool pool(*model_, {2, 64});
  Scheduler sch({8, 1000}, pool);
  Sequence s[3] = {make(0, 5), make(1, 5), make(2, 5)};
  for (Sequence& q : s) sch.add(&q);
  const StepPlan p = sch.plan_step();
  EXPECT_EQ(p.spans.size(), 2u);  // only two state slots
  EXPECT_EQ(sch.num_waiting(), 1u);
  run(sch, pool, p, {&s[0], &s[1], &s[2]});
  sch.remove(&s[0]);
  EXPECT_EQ(sch.plan_step().spans.size(), 2u);  // s[1] decodes, s[2] admitted
}

TEST_F(SchedulerTest, PreemptsTheNewestWhenBlocksRunOut) {
  // A token block holds 128 tokens' entries of every layer: a 130-token prompt of the tiny model needs one (its
  // windows close at 4, 8, … 128), two such prompts fill a two-block pool, and the decode step that closes the
  // window 128…131 needs a second block each.
  model::StatePool pool(*model_, {3, 2});
  EXPECT_EQ(pool.blocks_for_tokens(130), 1);
  EXPECT_EQ(pool.blocks_for_tokens(132), 2);
  Scheduler sch({3, 1000}, pool);
  Sequence a = make(0, 130), b = make(1, 130);
  sch.add(&a);
  sch.add(&b);
  StepPlan p = sch.plan_step();
  ASSERT_EQ(p.spans.size(), 2u);
  EXPECT_EQ(pool.free_blocks(), 0);
  run(sch, pool, p, {&a, &b});
  // Decoding needs new blocks soon; keep stepping until the pool is short and b (the newest) is preempted.
  bool preempted = false;
  for (int i = 0; i < 40 && !preempted; ++i) {
    p = sch.plan_step();
    for (uint64_t v : p.preempted) {
      EXPECT_EQ(v, b.id);
      EXPECT_EQ(b.num_computed, 0);
      EXPECT_EQ(b.slot, -1);
      preempted = true;
    }
    run(sch, pool, p, {&a, &b});
  }
  EXPECT_TRUE(preempted);
  EXPECT_EQ(sch.total_preemptions(), 1);
  EXPECT_EQ(sch.num_waiting(), 1u);
}

}  // namespace
}  // namespace strata::engine
