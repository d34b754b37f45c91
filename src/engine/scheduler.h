#pragma once
// Which sequences run in the next step and with how many tokens: continuous batching with chunked prefill under a
// per-step token budget. Decodes go first (one token each), then unfinished prefills, then new arrivals in order.
// When token blocks run short, the newest running sequence is preempted: its state is freed and it is recomputed
// from its tokens later (V4 state is a pure function of the tokens, so the result is identical).
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "model/state_pool.h"

namespace strata::engine {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;             // sequences in one step
  int64_t max_num_batched_tokens = 2048;  // tokens in one step (the prefill chunk budget)
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, model::StatePool& pool);

  void add(Sequence* seq);       // to the back of the waiting queue
  void remove(Sequence* seq);    // finished or aborted: frees its state, wherever it is
  // Which spans run next (engine/step_plan.h: plain data, sequences by id, states by slot). Sampling settings are
  // left for the engine to fill in.
  StepPlan plan_step();
  void commit(const StepPlan& plan);  // after the step ran: advance num_computed

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t total_preemptions() const { return preemptions_; }

 private:
  void preempt(Sequence* victim, StepPlan& plan);
  Sequence& known(uint64_t id) const;

  SchedulerConfig cfg_;
  model::StatePool& pool_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
  std::unordered_map<uint64_t, Sequence*> known_;  // waiting or running, by id
  int64_t preemptions_ = 0;
};

}  // namespace strata::engine
