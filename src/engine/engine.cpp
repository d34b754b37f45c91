#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "core/error.h"

namespace strata::engine {

Engine::Engine(const model::v4::Model& model, EngineConfig config)
    : model_(model), cfg_(config), pool_(model, config.pool), scheduler_(config.scheduler, pool_) {
  if (cfg_.max_model_len < 1) fail("max_model_len must be ≥ 1, got ", cfg_.max_model_len);
}

void Engine::validate_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const {
  const int64_t vocab = model_.config().vocab_size;
  params.validate(vocab);
  if (prompt.empty()) fail("prompt: must contain at least one token");
  for (int32_t t : prompt)
    if (t < 0 || t >= vocab) fail("prompt: token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  const auto total = static_cast<int64_t>(prompt.size()) + params.max_tokens;
  if (total > cfg_.max_model_len)
    fail("prompt: ", prompt.size(), " tokens plus max_tokens ", params.max_tokens, " exceed max_model_len ",
         cfg_.max_model_len);
  // Admission rule: a sequence must be able to reach its full length with the whole pool to itself; otherwise it
  // could only ever be preempted.
  if (pool_.pages_for_tokens(total) > pool_.limits().entry_pages)
    fail("prompt: ", total, " tokens need more compressed-entry pages than the state pool has (",
         pool_.limits().entry_pages, "); raise the state memory or lower max_tokens");
}

void Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt, const SamplingParams& params) {
  validate_request(prompt, params);
  for (const auto& [id, s] : sequences_)
    if (s->request_id == request_id) fail("request id '", request_id, "' is already in flight");

  const uint64_t seed = params.seed ? *params.seed : unseeded_();
  for (int64_t i = 0; i < params.n; ++i) {
    auto s = std::make_unique<Sequence>();
    s->id = next_id_++;
    s->request_id = request_id;
    s->index = i;
    s->prompt = prompt;
    s->params = params;
    s->seed = seed + static_cast<uint64_t>(i);
    s->history = TokenHistory(params.uses_history());
    s->history.add_prompt(s->prompt);
    s->arrival = std::chrono::steady_clock::now();
    Sequence& ref = *s;
    sequences_.emplace(s->id, std::move(s));
    if (params.max_tokens == 0) {
      finish(ref, FinishReason::Length, pending_events_, false);
      continue;
    }
    scheduler_.add(&ref);
  }
}

bool Engine::abort(const std::string& request_id) {
  bool found = false;
  for (auto it = sequences_.begin(); it != sequences_.end();) {
    Sequence& s = *it->second;
    ++it;  // finish() erases s
    if (s.request_id != request_id) continue;
    found = true;
    finish(s, FinishReason::Abort, pending_events_, false);
  }
  return found;
}

void Engine::finish(Sequence& seq, FinishReason reason, std::vector<TokenEvent>& events, bool with_token) {
  if (!with_token) events.push_back({seq.request_id, seq.index, std::nullopt, 0, {}, true, reason});
  else {
    events.back().finished = true;
    events.back().reason = reason;
  }
  seq.status = SequenceStatus::Finished;
  seq.finish = reason;
  scheduler_.remove(&seq);
  sequences_.erase(seq.id);
}

std::vector<TokenEvent> Engine::step() {
  const auto step_start = std::chrono::steady_clock::now();
  std::vector<TokenEvent> events = std::move(pending_events_);
  pending_events_.clear();
  StepPlan plan = scheduler_.plan_step();
  if (plan.empty()) return events;

  std::vector<model::v4::SequenceChunk> chunks;
  chunks.reserve(plan.chunks.size());
  for (const ScheduledChunk& c : plan.chunks) {
    model::v4::SequenceChunk mc;
    for (int64_t i = c.start; i < c.start + c.count; ++i) mc.tokens.push_back(c.seq->token_at(i));
    mc.state = c.seq->state;
    // A greedy pick that needs neither logprobs nor the history's penalties is the logits' argmax: the backend
    // takes it where the logits are (on a GPU only the id comes home).
    const SamplingParams& p = c.seq->params;
    mc.argmax_only = c.samples && p.greedy() && !p.logprobs && !p.uses_history();
    // So is a random pick without them: the engine computes the draw (the same number sample_token would use) and
    // the backend picks with it where the logits are (model::v4::PickParams).
    mc.sample_only = c.samples && !p.greedy() && !p.logprobs && !p.uses_history();
    if (mc.sample_only)
      mc.pick = {p.temperature, p.top_k, p.top_p, p.min_p,
                 counter_uniform(c.seq->seed, static_cast<uint64_t>(c.seq->output.size()))};
    chunks.push_back(std::move(mc));
    if (c.start < static_cast<int64_t>(c.seq->prompt.size()))
      totals_.prompt_tokens += std::min<int64_t>(c.count, static_cast<int64_t>(c.seq->prompt.size()) - c.start);
  }
  const auto model_start = std::chrono::steady_clock::now();
  const std::vector<Mat> logits = model_.forward_batch(chunks);
  totals_.model_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - model_start).count();
  scheduler_.commit(plan);
  ++totals_.steps;

  const auto& eos = model_.config().eos_token_ids;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    if (!c.samples) continue;
    Sequence& s = *c.seq;
    const int64_t vocab = model_.config().vocab_size;
    SampledToken t;
    if (chunks[i].argmax_only)
      t.id = chunks[i].argmax;
    else if (chunks[i].sample_only)
      t.id = chunks[i].sampled;
    else
      t = sample_token({logits[i].row(0), static_cast<size_t>(vocab)}, s.params, s.history, s.seed,
                       static_cast<uint64_t>(s.output.size()));
    s.output.push_back(t.id);
    s.history.add_output(t.id);
    ++totals_.generated_tokens;
    events.push_back({s.request_id, s.index, t.id, t.logprob, t.top, false, FinishReason::None});
    const bool stop_id = std::find(s.params.stop_token_ids.begin(), s.params.stop_token_ids.end(), t.id) !=
                         s.params.stop_token_ids.end();
    const bool eos_id = !s.params.ignore_eos && std::find(eos.begin(), eos.end(), t.id) != eos.end();
    if (stop_id || eos_id)
      finish(s, FinishReason::Stop, events, true);
    else if (static_cast<int64_t>(s.output.size()) >= s.params.max_tokens || s.num_tokens() >= cfg_.max_model_len)
      finish(s, FinishReason::Length, events, true);
  }
  totals_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  return events;
}

EngineStats Engine::stats() const {
  EngineStats s = totals_;
  s.running = static_cast<int64_t>(scheduler_.num_running());
  s.waiting = static_cast<int64_t>(scheduler_.num_waiting());
  s.used_slots = pool_.used_slots();
  s.used_pages = pool_.used_pages();
  s.total_pages = pool_.limits().entry_pages;
  s.preemptions = scheduler_.total_preemptions();
  return s;
}

}  // namespace strata::engine
