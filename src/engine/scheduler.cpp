#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace strata::engine {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Abort: return "abort";
    case FinishReason::None: break;
  }
  return "none";
}

int64_t StepPlan::num_tokens() const {
  int64_t n = 0;
  for (const ScheduledChunk& c : chunks) n += c.count;
  return n;
}

Scheduler::Scheduler(SchedulerConfig config, model::v4::StatePool& pool) : cfg_(config), pool_(pool) {
  if (cfg_.max_num_seqs < 1) fail("max_num_seqs must be ≥ 1, got ", cfg_.max_num_seqs);
  if (cfg_.max_num_batched_tokens < 1) fail("max_num_batched_tokens must be ≥ 1, got ", cfg_.max_num_batched_tokens);
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::Waiting;
  waiting_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  if (seq->state) {
    pool_.release(seq->state);
    seq->state = nullptr;
  }
}

void Scheduler::preempt(Sequence* victim, StepPlan& plan) {
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  pool_.release(victim->state);
  victim->state = nullptr;
  victim->num_computed = 0;
  victim->status = SequenceStatus::Waiting;
  ++victim->preemptions;
  ++preemptions_;
  waiting_.push_front(victim);
  plan.preempted.push_back(victim);
}

StepPlan Scheduler::plan_step() {
  StepPlan plan;
  int64_t budget = cfg_.max_num_batched_tokens;
  auto schedule = [&](Sequence* s, int64_t count) {
    plan.chunks.push_back({s, s->num_computed, count, s->num_computed + count == s->num_tokens()});
    budget -= count;
  };

  // Running sequences, oldest first: decodes and continuing prefills. A sequence that cannot get its pages
  // preempts the newest running one (possibly itself).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    const int64_t count = std::min(s->num_uncomputed(), budget);
    if (pool_.reserve(*s->state, count)) {
      schedule(s, count);
      ++i;
      continue;
    }
    Sequence* victim = running_.back();
    // The victim may already be planned this step (it is newer than nothing before it, so only if it is s).
    preempt(victim, plan);
    if (victim == s) continue;  // s is gone; running_[i] is now the next sequence
  }

  // New (or preempted) sequences in arrival order, while slots, pages and budget last.
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(plan.chunks.size()) < cfg_.max_num_seqs) {
    Sequence* s = waiting_.front();
    model::v4::SequenceState* state = pool_.acquire();
    if (!state) break;
    const int64_t count = std::min(s->num_uncomputed(), budget);
    if (!pool_.reserve(*state, count)) {
      pool_.release(state);
      break;  // strict arrival order: later arrivals wait too
    }
    waiting_.pop_front();
    s->state = state;
    s->status = SequenceStatus::Running;
    running_.push_back(s);
    schedule(s, count);
  }
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  for (const ScheduledChunk& c : plan.chunks) c.seq->num_computed += c.count;
}

}  // namespace strata::engine
