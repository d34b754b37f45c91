#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "engine/state_connector.h"

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

Scheduler::Scheduler(SchedulerConfig config, model::StatePool& pool) : cfg_(config), pool_(pool) {
  if (cfg_.max_num_seqs < 1) fail("max_num_seqs must be ≥ 1, got ", cfg_.max_num_seqs);
  if (cfg_.max_num_batched_tokens < 1) fail("max_num_batched_tokens must be ≥ 1, got ", cfg_.max_num_batched_tokens);
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::Waiting;
  waiting_.push_back(seq);
  known_[seq->id] = seq;
}

void Scheduler::remove(Sequence* seq) {
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  known_.erase(seq->id);
  if (seq->slot >= 0) {
    pool_.release_slot(seq->slot);
    seq->slot = -1;
  }
}

void Scheduler::preempt(Sequence* victim, StepPlan& plan) {
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  pool_.release_slot(victim->slot);
  victim->slot = -1;
  victim->num_computed = 0;
  victim->status = SequenceStatus::Waiting;
  ++victim->preemptions;
  ++preemptions_;
  waiting_.push_front(victim);
  plan.preempted.push_back(victim->id);
}

int64_t Scheduler::span_tokens(const Sequence& s, int64_t budget) const {
  int64_t count = std::min(s.num_uncomputed(), budget);
  if (hooks_.chunk_end) count = std::min(count, hooks_.chunk_end(s, s.num_computed) - s.num_computed);
  return count;
}

StepPlan Scheduler::plan_step() {
  StepPlan plan;
  int64_t budget = cfg_.max_num_batched_tokens;
  // A decode's drafts (speculative decoding: as many as the engine planned, engine/draft_planner.h) go into its span
  // while the budget lasts; they are verified in the same forward.
  auto drafts_of = [&](const Sequence& s, int64_t count) -> int64_t {
    if (count != 1 || s.num_uncomputed() != 1) return 0;
    return std::clamp<int64_t>(std::min<int64_t>(s.spec.planned, static_cast<int64_t>(s.spec.tokens.size())), 0, budget - 1);
  };
  auto schedule = [&](Sequence* s, int64_t count, int64_t drafts) {
    ScheduledSpan span;
    span.sequence_id = s->id;
    span.slot = s->slot;
    span.start = s->num_computed;
    span.tokens.reserve(static_cast<size_t>(count));
    for (int64_t i = span.start; i < span.start + count; ++i) span.tokens.push_back(s->token_at(i));
    // A sequence that hands its state to another engine (prefill/decode disaggregation) samples nothing here.
    span.samples = span.end() == s->num_tokens() && !s->handoff.exports();
    span.all_logits = s->params.capture_logits;
    for (int64_t j = 0; j < drafts; ++j) span.drafts.push_back({s->spec.tokens[static_cast<size_t>(j)], {}, 0, 0, {}});
    plan.spans.push_back(std::move(span));
    budget -= count + drafts;
  };

  // Running sequences, oldest first: decodes and continuing prefills. A sequence that cannot get its blocks
  // preempts the newest running one (possibly itself).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* s = running_[i];
    if (s->awaiting_state) {  // holds its slot and blocks while its state arrives; nothing to compute yet
      ++i;
      continue;
    }
    const int64_t count = span_tokens(*s, budget);
    // Drafts only where their blocks are free: a decode without them never preempts anyone for them.
    int64_t drafts = drafts_of(*s, count);
    if (drafts > 0 && !pool_.reserve(pool_.slot(s->slot), count + drafts)) drafts = 0;
    if (drafts > 0 || pool_.reserve(pool_.slot(s->slot), count)) {
      schedule(s, count, drafts);
      ++i;
      continue;
    }
    // The newest running sequence that is not awaiting its state (which holds all it needs, and whose arriving
    // layers would be lost); s itself at the latest.
    Sequence* victim = s;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it)
      if (!(*it)->awaiting_state) {
        victim = *it;
        break;
      }
    // The victim may already be planned this step (it is newer than nothing before it, so only if it is s).
    preempt(victim, plan);
    if (victim == s) continue;  // s is gone; running_[i] is now the next sequence
  }

  // New (or preempted) sequences in arrival order, while slots, blocks and budget last.
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(plan.spans.size()) < cfg_.max_num_seqs) {
    Sequence* s = waiting_.front();
    const std::optional<int32_t> slot = pool_.acquire_slot();
    if (!slot) break;
    int64_t restored = 0;
    if (s->num_computed == 0 && hooks_.restore) restored = hooks_.restore(*s, pool_.slot(*slot));
    if (restored == kWaitForRoom) {
      pool_.release_slot(*slot);
      break;  // strict arrival order: later arrivals wait too
    }
    s->num_computed = restored;
    if (s->awaiting_state) {  // admitted: it holds its slot and blocks while its state arrives (state_connector.h)
      waiting_.pop_front();
      s->slot = *slot;
      s->status = SequenceStatus::Running;
      running_.push_back(s);
      continue;
    }
    const int64_t count = span_tokens(*s, budget);
    if (!pool_.reserve(pool_.slot(*slot), count)) {
      pool_.release_slot(*slot);  // with whatever was restored into it
      s->num_computed = 0;
      break;  // strict arrival order: later arrivals wait too
    }
    waiting_.pop_front();
    s->slot = *slot;
    s->status = SequenceStatus::Running;
    running_.push_back(s);
    schedule(s, count, 0);
  }
  return plan;
}

Sequence& Scheduler::known(uint64_t id) const {
  const auto it = known_.find(id);
  if (it == known_.end()) fail("scheduler: sequence ", id, " is neither waiting nor running");
  return *it->second;
}

void Scheduler::commit(const StepPlan& plan, const StepOutput& out) {
  if (out.spans.size() != plan.spans.size())
    fail("scheduler: a step output of ", out.spans.size(), " spans for a plan of ", plan.spans.size());
  // With drafts, the state kept the span's token and the accepted ones (the runner rolled back the rest).
  for (size_t i = 0; i < plan.spans.size(); ++i)
    known(plan.spans[i].sequence_id).num_computed += static_cast<int64_t>(plan.spans[i].tokens.size()) + out.spans[i].accepted;
}

}  // namespace strata::engine
