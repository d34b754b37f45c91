#pragma once
// The serving engine: requests in, one token event per sampled token out. Each step the scheduler plans a batch
// (engine/step_plan.h), the engine adds each sampling span's settings, and the model runner runs it as one forward
// step with its sampling stage (engine/model_runner.h). The server and `strata generate` both drive this loop.
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/drafter.h"
#include "engine/imported_state_connector.h"
#include "engine/model_runner.h"
#include "engine/prefix_cache_connector.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "model/model.h"
#include "model/state_pool.h"

namespace strata::engine {

struct EngineConfig {
  SchedulerConfig scheduler;
  model::StatePoolLimits pool;
  int64_t max_model_len = 8192;  // prompt + generated tokens per sequence
  // Debugging parity (strata generate --dump-hidden): sees every step's residual streams after every layer.
  model::LayerObserver observe;
  // The KV-cache system (cache/prefix_cache.h): prompts resume from cached prefixes; null: off.
  std::shared_ptr<cache::PrefixCache> cache;
  // Speculative decoding with the model's MTP layer (docs/mtp.md); off by default.
  SpeculativeConfig speculative;
};

struct TokenEvent {
  std::string request_id;
  int64_t index = 0;  // which of the request's n completions
  std::optional<int32_t> token;  // absent on a finish without a new token (abort, max_tokens 0)
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top_logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::None;
  // With SamplingParams::capture_logits: the raw logits `token` was picked from, and on a sequence's first event
  // those of every prompt position ([prompt, vocab] row-major).
  std::vector<float> logits, prompt_logits;
  // On a sequence's first event: its prompt tokens restored from the prefix cache instead of computed (with an
  // imported state: those the other engine's cache held).
  int64_t cached_tokens = 0;
  // Speculative decoding: `token` is a draft the verification accepted (not the step's bonus or corrected token);
  // on the finishing event of a sequence that speculated, what speculation did for it.
  bool drafted = false;
  std::optional<SpeculativeCounts> speculative;
};

struct EngineStats {
  int64_t running = 0, waiting = 0, used_slots = 0, used_blocks = 0, total_blocks = 0, preemptions = 0;
  // Token blocks no sequence holds, kept findable by hash (the prefix cache's GPU tier), and those given up since.
  int64_t kept_blocks = 0, evicted_kept_blocks = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, steps = 0;
  // Wall time in step() and, of it, in the model runner (forward, the grammar masks built meanwhile, sampling
  // stage): the rest is the engine's own cost (planning, sampling settings, events).
  double step_seconds = 0, model_seconds = 0;
  // Speculative decoding: of step_seconds, the wall time of the MTP layer's draft steps after the forward
  // (Drafter::draft: its forwards, the picks, the streams' trips), outside model_seconds.
  double draft_seconds = 0;
  // Structured outputs: allowed-token masks built (one per constrained token) and the wall time of building them
  // (large batches in parallel). They are built during the model runner's call, after the forward is queued
  // (engine/model_runner.h, LateSpanMasks): on a GPU, while the device computes it. Of that time, the part hidden
  // behind the device: the whole mask time of each step whose forward was still running when its masks were ready
  // (a lower bound: a forward that ended while the masks were being built counts as not hiding them at all; 0 on
  // the CPU backend, where the forward has run before).
  int64_t grammar_masks = 0;
  double grammar_mask_seconds = 0, grammar_mask_hidden_seconds = 0;
  // Of grammar_masks, those built for MTP draft steps (engine/drafter.h: constrained chains draft under the grammar).
  int64_t draft_grammar_masks = 0;
  // Prefill/decode disaggregation: states handed out (prefill side); states restored at admission, and those that
  // could not be (their tokens were computed here instead) (decode side).
  int64_t exported_states = 0, imported_states = 0, import_failures = 0;
  int64_t exported_state_bytes = 0;
  // The engine thread's time writing those states (prefill side) and restoring the received ones (decode side):
  // what a transfer costs the steps of the other sequences.
  double state_export_seconds = 0, state_restore_seconds = 0;
  // Prompt tokens not yet computed of the waiting and prefilling sequences: the prefill work queued here (a
  // router's load signal, server/load_report.h).
  int64_t queued_prefill_tokens = 0;
  // Speculative decoding (engine/speculative_counts.h): drafted, verified, accepted, emitted, by draft position.
  SpeculativeCounts speculative;
};

class Engine {
 public:
  Engine(const model::Model& model, EngineConfig config);

  // Validates and queues a request (n sequences). Throws strata::Error naming the problem: a bad sampling
  // parameter, an empty or out-of-vocabulary prompt, a prompt that cannot fit max_model_len or the state memory,
  // a duplicate id.
  void add_request(const std::string& request_id, std::vector<int32_t> prompt, const SamplingParams& params,
                   const CacheOptions& cache = {}, const StateHandoff& handoff = {});
  // The checks of add_request that do not depend on what is in flight (safe from any thread).
  void validate_request(const std::vector<int32_t>& prompt, const SamplingParams& params) const;
  // Stops a request wherever it is; its sequences finish with reason "abort". False if unknown or already done.
  bool abort(const std::string& request_id);

  std::vector<TokenEvent> step();
  bool has_unfinished() const { return !sequences_.empty(); }
  // Whether step() has anything to do but wait for arriving states (StateHandoff::incoming).
  // (A step that planned nothing while states were arriving — the others wait for the room those hold — is not
  // worth repeating until one arrives.)
  bool has_work() const {
    if (!pending_events_.empty()) return true;
    if (imported_->awaiting() == 0) return !sequences_.empty();
    return !stalled_ && static_cast<int64_t>(sequences_.size()) > imported_->awaiting();
  }
  EngineStats stats() const;

 private:
  void finish(Sequence& seq, FinishReason reason, std::vector<TokenEvent>& events, bool with_token);
  // The allowed-token masks of a step's constrained sampling spans (structured outputs), one per sequence in order;
  // adds their count and wall time to the statistics and sets `seconds` to that time.
  std::vector<std::shared_ptr<const model::TokenMask>> build_masks(const std::vector<ConstrainedOutput*>& constrained,
                                                                   double& seconds);
  // A sequence admitted with nothing computed: the tokens the first connector that has some puts in place.
  int64_t restore_on_admission(Sequence& s, model::SequenceState& state);
  int64_t chunk_end(const Sequence& s, int64_t start) const;
  // On a sequence's first token or state export: the prompt tokens its usage reports as cached.
  int64_t reported_cached_tokens(Sequence& s);
  void export_state(Sequence& s, std::vector<TokenEvent>& events);
  // Speculative decoding: how many drafts each decoding sequence verifies this step (SequenceDrafts::planned).
  void plan_drafts();
  // A sampling span's drafts get what verifying them needs: their draws, and each next row's sampling settings.
  void fill_draft_checks(ScheduledSpan& span, Sequence& s);
  // After a step: the sequence's new last-layer streams join what the MTP layer has yet to consume, and a span that
  // sampled makes a draft job (its catch-up rows and how many drafts it may use).
  void collect_streams(Sequence& s, const ScheduledSpan& span, SpanOutput& o, std::vector<DraftJob>& jobs);

  const model::Model& model_;
  EngineConfig cfg_;
  model::StatePool pool_;
  Scheduler scheduler_;
  ModelRunner runner_;
  Drafter drafter_;
  // The state connectors (engine/state_connector.h), asked in this order.
  std::unique_ptr<ImportedStateConnector> imported_;
  std::unique_ptr<PrefixCacheConnector> prefix_cache_;  // null without a cache
  std::vector<StateConnector*> connectors_;
  std::map<uint64_t, std::unique_ptr<Sequence>> sequences_;  // unfinished, by id
  std::vector<TokenEvent> pending_events_;                   // produced outside step() (aborts, max_tokens 0)
  bool stalled_ = false;  // the last step planned nothing (has_work)
  uint64_t next_id_ = 0;
  EngineStats totals_;
  // Seeds of requests that bring none: drawn from the OS's entropy once, not twice per request (two
  // std::random_device reads were ~1.5% of the server's CPU in the serving benchmark).
  std::mt19937_64 unseeded_{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()};
};

}  // namespace strata::engine
