#pragma once
// Which sequences run in the next step and with how many tokens: continuous batching with chunked prefill under a
// per-step token budget. Decodes go first (one token each), then unfinished prefills, then new arrivals in order.
// When token blocks run short, the newest running sequence is preempted: its state is freed and it is recomputed
// from its tokens later (V4 state is a pure function of the tokens, so the result is identical).
#include <cstdint>
#include <deque>
#include <functional>
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

// How restored state takes part in planning (engine.cpp sets these): a state imported from another engine, or the
// prefix cache's.
struct PrefixHooks {
  // When a sequence with nothing computed gets a slot: the tokens restored into the slot's state (0: none).
  std::function<int64_t(Sequence&, model::SequenceState&)> restore;
  // Where a span that starts at `start` must end at the latest (a checkpoint the cache saves the state at); unset:
  // no limit.
  std::function<int64_t(const Sequence&, int64_t start)> chunk_end;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, model::StatePool& pool);
  void set_prefix_hooks(PrefixHooks hooks) { hooks_ = std::move(hooks); }

  void add(Sequence* seq);       // to the back of the waiting queue
  void remove(Sequence* seq);    // finished or aborted: frees its state, wherever it is
  // Which spans run next (engine/step_plan.h: plain data, sequences by id, states by slot). Sampling settings are
  // left for the engine to fill in.
  StepPlan plan_step();
  // After the step ran: advance num_computed by what each span's state kept (its tokens and accepted drafts).
  void commit(const StepPlan& plan, const StepOutput& out);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t total_preemptions() const { return preemptions_; }

 private:
  void preempt(Sequence* victim, StepPlan& plan);
  int64_t span_tokens(const Sequence& s, int64_t budget) const;
  Sequence& known(uint64_t id) const;

  SchedulerConfig cfg_;
  model::StatePool& pool_;
  PrefixHooks hooks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
  std::unordered_map<uint64_t, Sequence*> known_;  // waiting or running, by id
  int64_t preemptions_ = 0;
};

}  // namespace strata::engine
