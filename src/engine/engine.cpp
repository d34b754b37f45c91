#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "engine/draft_planner.h"

namespace strata::engine {

namespace {

// Where a constrained span's grammar stopped taking its step's tokens (indices into them; -1: it took them all).
struct GrammarVerdict {
  int64_t refused_at = -1;     // a token outside its mask (never, short of a bug): the sequence ends there
  int64_t terminated_at = -1;  // the token the grammar accepted as its end
};

}  // namespace

Engine::Engine(const model::Model& model, EngineConfig config)
    : model_(model),
      cfg_(config),
      pool_(model, config.pool),
      scheduler_(config.scheduler, pool_),
      runner_(model, pool_, config.observe),
      drafter_(model, pool_, cfg_.speculative) {
  if (cfg_.max_model_len < 1) fail("max_model_len must be ≥ 1, got ", cfg_.max_model_len);
  runner_.force_acceptance(cfg_.speculative.forced_acceptance);
  runner_.verify_by_rejection(cfg_.speculative.verify == SpeculativeConfig::Verify::Rejection);
  runner_.keep_rejected_streams(cfg_.speculative.catch_up_all_rows);
  const SpeculativeConfig& sp = cfg_.speculative;
  if (sp.tokens < 0 || sp.tokens > SpeculativeConfig::kMaxTokens)
    fail("speculative decoding: --speculative-tokens must be in [0, ", SpeculativeConfig::kMaxTokens, "], got ", sp.tokens);
  if (!(sp.min_prob >= 0.0 && sp.min_prob <= 1.0))
    fail("speculative decoding: --speculative-min-prob must be in [0, 1], got ", sp.min_prob);
  if (!(sp.step_cost_rows >= 0.0)) fail("speculative decoding: the step cost must be ≥ 0 rows, got ", sp.step_cost_rows);
  if (sp.enabled()) {
    if (model_.mtp_layers() == 0)
      fail("speculative decoding: --speculative-tokens ", sp.tokens, " drafts with the model's MTP layer, but this model has "
           "none (num_nextn_predict_layers is ", model_.config().num_nextn_predict_layers,
           ", and a checkpoint without mtp.* tensors has none either); use --speculative-tokens 0");
    if (sp.forced_acceptance && !(*sp.forced_acceptance >= 0.0 && *sp.forced_acceptance <= 1.0))
      fail("speculative decoding: the forced acceptance rate must be in [0, 1], got ", *sp.forced_acceptance);
    if (model_.state_layout().max_rollback < sp.tokens)
      fail("speculative decoding: --speculative-tokens ", sp.tokens, " needs states that can drop ", sp.tokens,
           " tokens, but the model was loaded with max_rollback ", model_.state_layout().max_rollback,
           " (load it with max_rollback ≥ the draft tokens)");
  }
  imported_ = std::make_unique<ImportedStateConnector>(model_, pool_);
  connectors_.push_back(imported_.get());
  if (cfg_.cache) {
    prefix_cache_ = std::make_unique<PrefixCacheConnector>(cfg_.cache, pool_);
    connectors_.push_back(prefix_cache_.get());
  }
  PrefixHooks hooks;
  hooks.restore = [this](Sequence& s, model::SequenceState& st) { return restore_on_admission(s, st); };
  if (cfg_.cache) hooks.chunk_end = [this](const Sequence& s, int64_t start) { return chunk_end(s, start); };
  scheduler_.set_prefix_hooks(std::move(hooks));
}

int64_t Engine::restore_on_admission(Sequence& s, model::SequenceState& state) {
  for (StateConnector* c : connectors_)
    if (const int64_t n = c->load(s, state); n != 0 || s.awaiting_state) return n;
  return 0;
}

int64_t Engine::chunk_end(const Sequence& s, int64_t start) const {
  int64_t end = INT64_MAX;
  for (const StateConnector* c : connectors_) end = std::min(end, c->chunk_end(s, start));
  return end;
}

int64_t Engine::reported_cached_tokens(Sequence& s) {
  for (StateConnector* c : connectors_)
    if (const std::optional<int64_t> n = c->reported_cached_tokens(s)) return *n;
  return 0;
}

void Engine::export_state(Sequence& s, std::vector<TokenEvent>& events) {
  const auto start = std::chrono::steady_clock::now();
  StateStream& out = *s.handoff.export_to;
  const model::SequenceState& state = pool_.slot(s.slot);
  out.set_cached_tokens(reported_cached_tokens(s));
  std::shared_ptr<model::SharedRegion> region;
  if (s.handoff.export_shared) {
    try {
      region = model_.make_shared_region(model_.snapshot_floats(state));
      out.set_shared_floats(region->handle(), region);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: request %s: no shared region for its state (%s); sending the floats in the bytes\n",
                   s.request_id.c_str(), e.what());
      region.reset();
    }
  }
  // Piece by piece: the server sends each layer's as soon as it is off the device (or, shared, in the region).
  model_.snapshot_pieces(state, [&](std::string piece) {
    totals_.exported_state_bytes += static_cast<int64_t>(piece.size());
    out.append(std::move(piece));
  }, region.get());
  if (region) totals_.exported_state_bytes += region->floats() * static_cast<int64_t>(sizeof(float));
  out.finish();
  ++totals_.exported_states;
  totals_.state_export_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  events.push_back({s.request_id, s.index, std::nullopt, 0, {}, false, FinishReason::None, {}, {}, 0, false, std::nullopt});
  finish(s, FinishReason::Stop, events, true);
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
  if (pool_.blocks_for_tokens(total) > pool_.limits().blocks)
    fail("prompt: ", total, " tokens need ", pool_.blocks_for_tokens(total), " token blocks, more than the state pool has (",
         pool_.limits().blocks, "); raise the state memory or lower max_tokens");
}

void Engine::add_request(const std::string& request_id, std::vector<int32_t> prompt, const SamplingParams& params,
                         const CacheOptions& cache, const StateHandoff& handoff) {
  validate_request(prompt, params);
  if (handoff.exports() && handoff.incoming) fail("a state handoff either exports or imports, not both");
  if (handoff.exports() && params.n != 1) fail("a state export is one sequence (n = 1), got n = ", params.n);
  for (const auto& [id, s] : sequences_)
    if (s->request_id == request_id) fail("request id '", request_id, "' is already in flight");

  if (cache.ttl_seconds < 0) fail("cache: a time to live must be ≥ 0 s, got ", cache.ttl_seconds);
  // A logits capture needs every prompt position computed, so it neither restores nor saves.
  const bool cached = cfg_.cache && cache.enabled && !params.capture_logits;
  model::BlockHash salt;
  std::vector<model::BlockHash> hashes;
  if (cached) {
    salt = cfg_.cache->salt(cache.scope);
    hashes = model::block_hashes(salt, prompt, cfg_.cache->block_tokens());
  }
  const uint64_t seed = params.seed ? *params.seed : unseeded_();
  const int64_t vocab = model_.config().vocab_size;
  const auto& eos_ids = model_.config().eos_token_ids;
  const int32_t eos = eos_ids.empty() ? 0 : static_cast<int32_t>(eos_ids.front());
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
    if (params.constraint) s->constrained = std::make_unique<ConstrainedOutput>(params.constraint, vocab, eos);
    s->arrival = std::chrono::steady_clock::now();
    s->handoff = handoff;
    // A logits capture wants each token's own row, and a state export samples nothing. Grammar-constrained ones do
    // speculate: each verify row gets the mask of the grammar state after the drafts before it (plan_drafts).
    s->spec.enabled = cfg_.speculative.enabled() && !params.capture_logits && !handoff.exports();
    if (cached) {
      s->cache.emplace();
      s->cache->salt = salt;
      s->cache->hashes = hashes;
      s->cache->ttl_seconds = cache.ttl_seconds > 0 ? cache.ttl_seconds : cfg_.cache->config().ttl_chat_seconds;
    }
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
  // An export that ends without its state (aborted, or the prompt could not run) tells its reader so.
  if (seq.handoff.export_to) seq.handoff.export_to->fail(cat("the prefill ended without a state (", to_string(reason), ")"));
  // Nothing reads an arriving state's shared region after its sequence ends: its maker may free it.
  if (seq.handoff.incoming) seq.handoff.incoming->release_shared();
  if (!with_token) events.push_back({seq.request_id, seq.index, std::nullopt, 0, {}, true, reason, {}, {}, 0, false, std::nullopt});
  else {
    events.back().finished = true;
    events.back().reason = reason;
  }
  if (seq.spec.enabled) events.back().speculative = seq.spec.counts;
  if (seq.slot >= 0)
    for (StateConnector* c : connectors_) c->on_finish(seq, pool_.slot(seq.slot));
  seq.status = SequenceStatus::Finished;
  seq.finish = reason;
  scheduler_.remove(&seq);
  sequences_.erase(seq.id);
}

std::vector<std::shared_ptr<const model::TokenMask>> Engine::build_masks(
    const std::vector<ConstrainedOutput*>& constrained, double& seconds) {
  const auto start = std::chrono::steady_clock::now();
  int64_t built = 0;
  for (const ConstrainedOutput* c : constrained) built -= c->masks_built();
  // Each sequence's matcher is its own and the compiled grammars are safe to share, so a large batch's masks are
  // built on every core (a JSON-schema mask is ~10 us; 64 of them would be most of a GPU decode step's CPU time).
  const auto n = static_cast<int64_t>(constrained.size());
  std::vector<std::shared_ptr<const model::TokenMask>> masks(constrained.size());
#pragma omp parallel for schedule(dynamic) if (n >= 8)
  for (int64_t i = 0; i < n; ++i) masks[static_cast<size_t>(i)] = constrained[static_cast<size_t>(i)]->next_mask();
  for (const ConstrainedOutput* c : constrained) built += c->masks_built();
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  totals_.grammar_masks += built;
  totals_.grammar_mask_seconds += seconds;
  return masks;
}

std::vector<TokenEvent> Engine::step() {
  const auto step_start = std::chrono::steady_clock::now();
  std::vector<TokenEvent> events = std::move(pending_events_);
  pending_events_.clear();
  imported_->poll();  // the layers of arriving states that are whole now go into their slots
  if (cfg_.speculative.enabled()) plan_drafts();
  StepPlan plan = scheduler_.plan_step();
  stalled_ = plan.empty();
  // A preempted sequence's state is gone, the MTP layer's with it: its drafts and streams are recomputed.
  for (uint64_t id : plan.preempted)
    if (const auto it = sequences_.find(id); it != sequences_.end()) it->second->spec.clear();
  if (plan.empty()) return events;
  // Constrained spans get their masks late: built inside the runner's call, once the forward is queued.
  LateSpanMasks late;
  std::vector<ConstrainedOutput*> constrained;

  for (size_t i = 0; i < plan.spans.size(); ++i) {
    ScheduledSpan& span = plan.spans[i];
    Sequence& s = *sequences_.at(span.sequence_id);
    const auto prompt_len = static_cast<int64_t>(s.prompt.size());
    if (span.start < prompt_len) totals_.prompt_tokens += std::min(span.end(), prompt_len) - span.start;
    // The MTP layer drafts from the main model's last-layer streams of the last `window` positions (it is
    // window-only: older ones never reach its next draft).
    if (s.spec.enabled) span.streams_from = std::max(span.start, s.num_tokens() - model_.config().sliding_window);
    if (!span.samples) continue;
    // The draw is a function of (seed, output position) alone, so a preempted and resumed sequence, or one batched
    // differently, picks the same token.
    span.sampling = SpanSampling{s.params.processes_logits() ? penalties_of(s.params, s.history) : model::RowPenalties{},
                                 pick_of(s.params, s.seed, static_cast<uint64_t>(s.output.size())), s.params.logprobs,
                                 nullptr};
    if (s.constrained) {
      late.spans.push_back(i);
      constrained.push_back(s.constrained.get());
    }
    if (!span.drafts.empty()) fill_draft_checks(span, s);
  }
  double mask_seconds = 0;
  if (!constrained.empty()) late.build = [&] { return build_masks(constrained, mask_seconds); };
  const auto model_start = std::chrono::steady_clock::now();
  StepOutput out = runner_.execute(plan, late);
  totals_.model_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - model_start).count();
  if (out.late_masks_hidden) totals_.grammar_mask_hidden_seconds += mask_seconds;
  // Each constrained row's grammar takes its picks (a verify span's accepted drafts and the token after them), up to
  // the one that ends it. A matcher is its sequence's own, so the rows go in parallel, as their masks do: one after
  // another, 64 rows' advances were a tenth of a small model's GPU decode step.
  std::vector<GrammarVerdict> verdicts(plan.spans.size());
  {
    const auto n = static_cast<int64_t>(late.spans.size());
#pragma omp parallel for schedule(dynamic) if (n >= 8)
    for (int64_t k = 0; k < n; ++k) {
      const size_t i = late.spans[static_cast<size_t>(k)];
      ConstrainedOutput& c = *constrained[static_cast<size_t>(k)];
      const std::vector<int32_t>& tokens = out.spans[i].tokens;
      for (size_t t = 0; t < tokens.size(); ++t) {
        if (!c.accept(tokens[t])) {
          verdicts[i].refused_at = static_cast<int64_t>(t);
          break;
        }
        if (c.terminated()) {
          verdicts[i].terminated_at = static_cast<int64_t>(t);
          break;
        }
      }
    }
  }
  scheduler_.commit(plan, out);
  ++totals_.steps;
  for (const ScheduledSpan& span : plan.spans)
    if (Sequence& s = *sequences_.at(span.sequence_id); s.slot >= 0)
      for (StateConnector* c : connectors_) c->after_step(s, pool_.slot(s.slot));

  const auto& eos = model_.config().eos_token_ids;
  const int64_t vocab = model_.config().vocab_size;
  std::vector<DraftJob> jobs;  // speculative decoding: the MTP layer's work after this step
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const ScheduledSpan& span = plan.spans[i];
    SpanOutput& o = out.spans[i];
    Sequence& s = *sequences_.at(span.sequence_id);
    if (span.all_logits) {
      // Rows of prompt positions not captured before (a preempted sequence recomputes them) join the prompt's
      // capture; rows of positions past the prompt were handed out with their tokens already.
      const auto prompt_len = static_cast<int64_t>(s.prompt.size());
      for (int64_t pos = std::max(span.start, s.captured_rows); pos < std::min(span.end(), prompt_len); ++pos) {
        const auto row = o.logits.begin() + (pos - span.start) * vocab;
        s.prompt_logits.insert(s.prompt_logits.end(), row, row + vocab);
        s.captured_rows = pos + 1;
      }
    }
    if (!span.samples) {
      if (s.handoff.exports() && span.end() == static_cast<int64_t>(s.prompt.size())) export_state(s, events);
      else if (s.spec.enabled) collect_streams(s, span, o, jobs);
      continue;
    }
    // One event per token: a span that verified drafts emits the accepted ones and the token after them, up to the
    // first that ends the sequence (EOS, a stop id, max_tokens): the rest are dropped, never emitted.
    SpeculativeCounts counts;
    if (!span.drafts.empty()) {
      counts.verify_steps = 1;
      counts.verified = static_cast<int64_t>(span.drafts.size());
      counts.accepted = o.accepted;
      for (size_t j = 0; j < span.drafts.size(); ++j) counts.add_position(j, static_cast<int64_t>(j) < o.accepted);
    }
    std::optional<FinishReason> ends;
    for (size_t t = 0; t < o.tokens.size() && !ends; ++t) {
      const int32_t token = o.tokens[t];
      const bool first = s.output.empty();
      s.output.push_back(token);
      s.history.add_output(token);
      ++totals_.generated_tokens;
      if (!span.drafts.empty()) ++counts.emitted;
      TokenEvent e{s.request_id, s.index, token, o.logprob, {}, false, FinishReason::None, {}, {}, 0, false, std::nullopt};
      if (t == 0) {
        e.top_logprobs = std::move(o.top_logprobs);
      } else if (t - 1 < o.later_logprobs.size()) {  // logprobs were asked
        e.logprob = o.later_logprobs[t - 1].logprob;
        e.top_logprobs = std::move(o.later_logprobs[t - 1].top);
      } else {
        e.logprob = 0;
      }
      e.drafted = static_cast<int64_t>(t) < o.accepted;
      if (first) {
        e.cached_tokens = reported_cached_tokens(s);
        s.handoff.incoming.reset();  // its bytes are done with: a preempted sequence is recomputed (or restored from the cache)
      }
      if (span.all_logits) {
        e.logits.assign(o.logits.end() - vocab, o.logits.end());
        if (first) e.prompt_logits = std::move(s.prompt_logits);
      }
      events.push_back(std::move(e));
      const bool stop_id = std::find(s.params.stop_token_ids.begin(), s.params.stop_token_ids.end(), token) !=
                           s.params.stop_token_ids.end();
      const bool eos_id = !s.params.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end();
      // A grammar that refuses the pick (a pick outside its mask: never, short of a bug) ends the sequence; one
      // that accepted its end stops it, ignore_eos or not.
      const auto at = static_cast<int64_t>(t);
      if (verdicts[i].refused_at == at) ends = FinishReason::Abort;
      else if (stop_id || eos_id || verdicts[i].terminated_at == at) ends = FinishReason::Stop;
      else if (static_cast<int64_t>(s.output.size()) >= s.params.max_tokens || s.num_tokens() >= cfg_.max_model_len)
        ends = FinishReason::Length;
    }
    if (!span.drafts.empty()) counts.truncated = static_cast<int64_t>(o.tokens.size()) - counts.emitted;
    s.spec.counts += counts;
    totals_.speculative += counts;
    if (ends) {
      finish(s, *ends, events, true);
      continue;
    }
    if (s.spec.enabled) collect_streams(s, span, o, jobs);
  }
  if (!jobs.empty()) {
    const auto draft_start = std::chrono::steady_clock::now();
    const DraftStats drafted = drafter_.draft(jobs);
    totals_.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - draft_start).count();
    totals_.speculative.drafted += drafted.proposed;
    totals_.grammar_masks += drafted.masks;  // built after the step, for the draft steps: never hidden behind a forward
    totals_.draft_grammar_masks += drafted.masks;
    totals_.grammar_mask_seconds += drafted.mask_seconds;
    for (DraftJob& job : jobs) job.seq->spec.counts.drafted += static_cast<int64_t>(job.seq->spec.tokens.size());
  }
  totals_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
  return events;
}

void Engine::plan_drafts() {
  std::vector<Sequence*> decoding;
  std::vector<std::vector<float>> probs;
  std::vector<size_t> constrained;  // indices into `decoding`
  int64_t decodes = 0;
  for (const auto& [id, s] : sequences_) {
    if (s->status != SequenceStatus::Running || s->awaiting_state || s->num_uncomputed() != 1) continue;
    ++decodes;
    s->spec.planned = 0;
    if (s->spec.tokens.empty()) continue;
    decoding.push_back(s.get());
    probs.push_back(s->spec.probs);
    if (s->constrained) {
      // Drafts the grammar refuses would be rejected by the masked rows: they are not worth a row.
      probs.back().resize(std::min(probs.back().size(), s->constrained->allowed_prefix(s->spec.tokens)));
      constrained.push_back(decoding.size() - 1);
    }
  }
  // The step's other rows (prefill chunks) are left out of the cost: the plan is made before the scheduler chunks.
  const std::vector<int64_t> take = engine::plan_drafts(probs, decodes, decodes, cfg_.speculative.step_cost_rows);
  for (size_t i = 0; i < decoding.size(); ++i) decoding[i]->spec.planned = take[i];
  // Constrained sequences: each planned draft's row picks under the grammar state after it. Matchers are their
  // sequences' own, so the masks are built in parallel (as build_masks does).
  if (constrained.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  int64_t built = 0;
  for (size_t k : constrained) built -= decoding[k]->constrained->masks_built();
  const auto n = static_cast<int64_t>(constrained.size());
#pragma omp parallel for schedule(dynamic) if (n >= 8)
  for (int64_t k = 0; k < n; ++k) {
    Sequence& s = *decoding[constrained[static_cast<size_t>(k)]];
    s.spec.masks = s.constrained->masks_after(s.spec.tokens, static_cast<size_t>(s.spec.planned));
  }
  for (size_t k : constrained) built += decoding[k]->constrained->masks_built();
  totals_.grammar_masks += built;  // built before the step, so never hidden behind its forward
  totals_.grammar_mask_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Engine::fill_draft_checks(ScheduledSpan& span, Sequence& s) {
  // Draft j stands at output position output.size() + j; the row after it picks position output.size() + j + 1,
  // with the draft in the history (penalties see the tokens before the one they pick, as without drafts).
  TokenHistory history = s.history;
  for (size_t j = 0; j < span.drafts.size(); ++j) {
    DraftToken& d = span.drafts[j];
    const uint64_t index = s.output.size() + j;
    if (j < s.spec.dists.size()) d.q = std::move(s.spec.dists[j]);
    d.accept_uniform = accept_uniform(s.seed, index);
    d.residual_uniform = residual_uniform(s.seed, index);
    history.add_output(d.id);
    d.next = SpanSampling{s.params.processes_logits() ? penalties_of(s.params, history) : model::RowPenalties{},
                          pick_of(s.params, s.seed, index + 1), s.params.logprobs,
                          j < s.spec.masks.size() ? s.spec.masks[j] : nullptr};
    if (s.constrained && j >= s.spec.masks.size())
      fail("engine: sequence ", s.id, " verifies draft ", j, " without its grammar mask (", s.spec.masks.size(), " built)");
  }
}

void Engine::collect_streams(Sequence& s, const ScheduledSpan& span, SpanOutput& o, std::vector<DraftJob>& jobs) {
  SequenceDrafts& d = s.spec;
  if (o.streams_from >= 0 && o.streams.rows > 0) {
    if (d.streams_from >= 0 && d.streams_from + d.streams.rows == o.streams_from) {
      d.streams.v.insert(d.streams.v.end(), o.streams.v.begin(), o.streams.v.end());
      d.streams.rows += o.streams.rows;
    } else {
      d.streams = std::move(o.streams);
      d.streams_from = o.streams_from;
    }
    // Only the last `window` positions reach the next draft (the MTP layer is window-only).
    const int64_t window = model_.config().sliding_window;
    if (d.streams.rows > window) {
      const int64_t drop = d.streams.rows - window;
      d.streams.v.erase(d.streams.v.begin(), d.streams.v.begin() + drop * d.streams.cols);
      d.streams.rows = window;
      d.streams_from += drop;
    }
  }
  d.clear_drafts();  // whatever was proposed before this step has been verified (or was not used)
  if (!span.samples) return;
  // The catch-up must end at the last computed position (its next token is the one just sampled).
  if (d.streams_from < 0 || d.streams_from + d.streams.rows != s.num_computed) {
    d.streams = Mat();
    d.streams_from = -1;
    return;
  }
  const int64_t remaining = std::min(s.params.max_tokens - static_cast<int64_t>(s.output.size()),
                                     cfg_.max_model_len - s.num_tokens());
  int64_t max_drafts = std::min(cfg_.speculative.tokens, remaining - 1);
  if (s.cache && prefix_cache_) {
    // The prefix cache stages a decode's rows when a step ends exactly on a block boundary (prefix_cache_connector.h):
    // a verify step whose token and drafts would reach past the next boundary could step over it, and a later hit
    // would resume at an earlier one. So the drafts stop at the boundary; the step that reaches it takes none.
    const int64_t block = cfg_.cache->block_tokens(), next_boundary = (s.num_computed / block + 1) * block;
    max_drafts = std::min(max_drafts, next_boundary - s.num_computed - 1);
  }
  DraftJob job{&s, d.streams_from, std::move(d.streams), max_drafts, {}, {}};
  if (o.rejected_streams.rows > 0) {  // only with catch_up_all_rows (ModelRunner::keep_rejected_streams)
    job.spare = std::move(o.rejected_streams);
    job.spare_next = std::move(o.rejected_next);
  }
  d.streams = Mat();
  d.streams_from = -1;
  if (job.max_drafts > 0) jobs.push_back(std::move(job));
}

EngineStats Engine::stats() const {
  EngineStats s = totals_;
  s.running = static_cast<int64_t>(scheduler_.num_running());
  s.waiting = static_cast<int64_t>(scheduler_.num_waiting());
  s.used_slots = pool_.used_slots();
  s.used_blocks = pool_.used_blocks();
  s.kept_blocks = pool_.blocks().kept_blocks();
  s.evicted_kept_blocks = pool_.blocks().evicted_blocks();
  s.total_blocks = pool_.limits().blocks;
  s.preemptions = scheduler_.total_preemptions();
  s.imported_states = imported_->imported();
  s.import_failures = imported_->failures();
  s.state_restore_seconds = imported_->restore_seconds();
  for (const auto& [id, seq] : sequences_) {
    const auto prompt = static_cast<int64_t>(seq->prompt.size());
    // A preempted sequence waits to recompute its outputs too; that is prefill work all the same.
    if (seq->status == SequenceStatus::Waiting) s.queued_prefill_tokens += seq->num_uncomputed();
    else if (seq->status == SequenceStatus::Running && seq->num_computed < prompt)
      s.queued_prefill_tokens += prompt - seq->num_computed;
  }
  return s;
}

}  // namespace strata::engine
