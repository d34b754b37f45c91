#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sampler.h"

namespace strata::engine {

ModelRunner::ModelRunner(const model::Model& model, model::StatePool& pool, model::LayerObserver observe)
    : model_(model), pool_(pool), observe_(std::move(observe)) {}

StepOutput ModelRunner::execute(const StepPlan& plan, const LateSpanMasks& late) {
  StepOutput out;
  if (plan.empty()) return out;
  const int64_t vocab = model_.config().vocab_size;
  std::vector<bool> late_mask(plan.spans.size(), false);
  for (size_t k = 0; k < late.spans.size(); ++k) {
    const size_t i = late.spans[k];
    if (i >= plan.spans.size() || (k > 0 && i <= late.spans[k - 1]))
      fail("model runner: late masks for span ", i, ", out of order or outside the plan's ", plan.spans.size(), " spans");
    const ScheduledSpan& span = plan.spans[i];
    if (!span.sampling || span.sampling->allowed)
      fail("model runner: sequence ", span.sequence_id, " gets a late mask but ",
           span.sampling ? "has a mask already" : "does not sample");
    late_mask[i] = true;
  }
  if (!late.spans.empty() && !late.build) fail("model runner: late masks for ", late.spans.size(), " spans, but nothing builds them");

  // The model's chunks, and the sampling stage over their logits rows (numbered chunk after chunk: every row of an
  // all_logits span, else only its last).
  std::vector<model::SequenceChunk> chunks;
  chunks.reserve(plan.spans.size());
  model::LogitsStage stage;
  std::vector<int64_t> first_row(plan.spans.size()), pick_request(plan.spans.size(), -1);
  int64_t rows = 0;
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const ScheduledSpan& span = plan.spans[i];
    model::SequenceState& state = pool_.slot(span.slot);
    if (state.num_tokens != span.start)
      fail("model runner: sequence ", span.sequence_id, " starts at token ", span.start, " but its state slot ",
           span.slot, " holds ", state.num_tokens);
    if (span.samples != span.sampling.has_value())
      fail("model runner: sequence ", span.sequence_id, span.samples ? " samples without" : " has sampling settings but does not sample",
           " sampling settings");
    if (!span.draft_tokens.empty())
      fail("model runner: sequence ", span.sequence_id, " asks for draft verification, which this runner does not do yet");
    chunks.push_back({span.tokens, &state, span.all_logits});
    const int64_t count = span.all_logits ? static_cast<int64_t>(span.tokens.size()) : 1;
    first_row[i] = rows;
    for (int64_t r = 0; r < count; ++r) {
      const bool last = r + 1 == count;
      model::LogitsRowRequest req{rows + r, span.all_logits, {}, std::nullopt, nullptr};
      if (last && span.sampling) {
        req.raw_home = req.raw_home || span.sampling->logprobs.has_value();
        req.penalties = span.sampling->penalties;
        req.pick = span.sampling->pick;
        req.allowed = span.sampling->allowed;
        // Late masks come in span order, which is the stage's row order (rows are numbered chunk after chunk).
        req.allowed_late = late_mask[i];
        pick_request[i] = static_cast<int64_t>(stage.rows.size());
      }
      if (req.raw_home || req.pick) stage.rows.push_back(std::move(req));
    }
    rows += count;
  }

  if (!late.spans.empty()) stage.late_masks = late.build;
  const model::StepLogits home = model_.run_step(chunks, stage, observe_);
  out.late_masks_hidden = home.late_masks_hidden;

  // Raw rows came home in request order; find each span's by its logits row.
  std::vector<int64_t> raw_index(static_cast<size_t>(rows), -1);
  for (int64_t r = 0, next = 0; r < static_cast<int64_t>(stage.rows.size()); ++r)
    if (stage.rows[r].raw_home) raw_index[stage.rows[r].row] = next++;
  out.spans.reserve(plan.spans.size());
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const ScheduledSpan& span = plan.spans[i];
    SpanOutput o;
    o.sequence_id = span.sequence_id;
    const int64_t count = span.all_logits ? static_cast<int64_t>(span.tokens.size()) : 1;
    if (span.all_logits) {
      o.logits.reserve(static_cast<size_t>(count * vocab));
      for (int64_t r = 0; r < count; ++r) {
        const float* row = home.raw.row(raw_index[first_row[i] + r]);
        o.logits.insert(o.logits.end(), row, row + vocab);
      }
    }
    if (pick_request[i] >= 0) {
      SampledToken t;
      t.id = home.picks[static_cast<size_t>(pick_request[i])];
      if (span.sampling->logprobs) {
        const float* row = home.raw.row(raw_index[first_row[i] + count - 1]);
        add_logprobs({row, static_cast<size_t>(vocab)}, *span.sampling->logprobs, t);
        o.logprob = t.logprob;
        o.top_logprobs = std::move(t.top);
      }
      o.tokens.push_back(t.id);
    }
    out.spans.push_back(std::move(o));
  }
  return out;
}

}  // namespace strata::engine
