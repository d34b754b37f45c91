#pragma once
// What the scheduler decided for one step, as plain data (the shape of vLLM v1's SchedulerOutput): sequences are
// named by id and their state by its pool slot, never by pointers into engine objects, so a plan can be logged,
// compared in tests, or sent to a worker in another process. The model runner (engine/model_runner.h) consumes it
// and answers with a StepOutput.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/logits_stage.h"

namespace strata::engine {

// How a sampling span's next token is chosen: the logit processors, the allowed-token mask and the pick (made where
// the logits are), and how many logprobs come back with it (from the raw logits).
struct SpanSampling {
  model::RowPenalties penalties;
  model::TokenPick pick;
  std::optional<int64_t> logprobs;  // the chosen token's logprob and this many top alternatives
  // Structured outputs: the tokens the pick may choose (the sequence's grammar state; null: any).
  std::shared_ptr<const model::TokenMask> allowed;
};

// One draft token a sampling span verifies (speculative decoding, docs/mtp.md). Draft j is checked against the
// logits row before it (row j of the span's tokens + drafts), which picks the token in its place.
struct DraftToken {
  int32_t id = 0;
  // The distribution it was drawn from (sampling, over the vocabulary); empty: a point mass on id (greedy drafts,
  // the test hook's).
  std::vector<float> q;
  double accept_uniform = 0, residual_uniform = 0;  // the verification's draws (counter_uniform of its position)
  // The sampling settings of the row after it, whose pick follows this draft (the draft joined the history).
  SpanSampling next;
};

// A transfer of state between this engine and a store or another engine (the KV-cache and PD-disaggregation
// connectors fill these in; nothing produces them yet).
struct KvTransfer {
  enum class Kind { Load, Save };
  Kind kind = Kind::Save;
  uint64_t sequence_id = 0;
  int64_t first_token = 0, num_tokens = 0;  // the block-aligned token range moved
};

// One sequence's part of the step: tokens [start, start + tokens.size()) of its known tokens go through the model,
// into the state held in `slot`.
struct ScheduledSpan {
  uint64_t sequence_id = 0;
  int32_t slot = -1;             // the sequence's state slot in the pool
  int64_t start = 0;             // position of the first token (== the tokens already in the state)
  std::vector<int32_t> tokens;   // their ids
  bool samples = false;          // the span reaches the end of the known tokens: the next token is picked
  bool all_logits = false;       // every row's raw logits come home (a logits capture), not only the last
  std::optional<SpanSampling> sampling;  // set when `samples`
  // Speculative decoding: tokens proposed after `tokens` (a decode's one token), verified in the same forward; the
  // runner keeps the accepted ones and rolls the state back past the rest.
  std::vector<DraftToken> drafts;
  // The last layer's residual streams of positions ≥ streams_from of this span come home (-1: none), what the MTP
  // layer drafts from; with drafts, only the kept rows' are returned.
  int64_t streams_from = -1;
  int64_t end() const { return start + static_cast<int64_t>(tokens.size()); }
};

struct StepPlan {
  std::vector<ScheduledSpan> spans;
  std::vector<uint64_t> preempted;       // sequences whose state was freed this step (recomputed later)
  std::vector<KvTransfer> kv_transfers;  // before the forward: loads; after it: saves (none yet)
  int64_t num_tokens() const {
    int64_t n = 0;
    for (const ScheduledSpan& s : spans) n += static_cast<int64_t>(s.tokens.size() + s.drafts.size());
    return n;
  }
  bool empty() const { return spans.empty(); }
};

struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// What the runner answers for one span.
struct SpanOutput {
  uint64_t sequence_id = 0;
  std::vector<int32_t> tokens;  // picked tokens (one for a sampling span; with drafts, the accepted ones plus one)
  int64_t accepted = 0;         // draft tokens accepted (speculative decoding; 0 without drafts)
  float logprob = 0;            // of tokens[0], under the raw logits (when logprobs were asked)
  std::vector<std::pair<int32_t, float>> top_logprobs;
  std::vector<TokenLogprobs> later_logprobs;  // of tokens[1..] (accepted drafts' rows), when logprobs were asked
  std::vector<float> logits;    // with all_logits: the span's raw logits rows, [rows, vocab] row-major
  Mat streams;                  // with streams_from: the last layer's streams of positions streams_from onward
  int64_t streams_from = -1;    // (with drafts, up to the last kept position)
  // With drafts and streams_from, the streams of the verified rows the state dropped (positions after the last kept
  // one, to the span's end) and, for each, the token after its position in the span (the last row, which has none,
  // repeats its own): the spare rows of a fixed-shape MTP catch-up (SpeculativeConfig::catch_up_all_rows).
  Mat rejected_streams;
  std::vector<int32_t> rejected_next;
};

struct StepOutput {
  std::vector<SpanOutput> spans;  // one per span of the plan, in plan order
  // Masks given late (engine/model_runner.h): the device was still computing the forward when they were ready.
  bool late_masks_hidden = false;
};

}  // namespace strata::engine
