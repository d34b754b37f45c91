#include "engine/model_runner.h"

#include <algorithm>
#include <bit>

#include "core/error.h"
#include "engine/sampler.h"

namespace strata::engine {

namespace {

// Tokens of the vocabulary a mask allows.
int64_t allowed_count(const model::TokenMask& allowed, int64_t vocab) {
  int64_t n = 0;
  const auto words = std::min<size_t>(allowed.size(), static_cast<size_t>(vocab / 32));
  for (size_t w = 0; w < words; ++w) n += std::popcount(allowed[w]);
  for (int64_t id = static_cast<int64_t>(words) * 32; id < vocab && id / 32 < static_cast<int64_t>(allowed.size()); ++id)
    n += (allowed[static_cast<size_t>(id / 32)] >> (id % 32)) & 1u;
  return n;
}

}  // namespace

ModelRunner::ModelRunner(const model::Model& model, model::StatePool& pool, model::LayerObserver observe)
    : model_(model), pool_(pool), observe_(std::move(observe)) {}

StepOutput ModelRunner::execute(const StepPlan& plan) {
  StepOutput out;
  if (plan.empty()) return out;
  const int64_t vocab = model_.config().vocab_size;

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
        if (const auto& allowed = span.sampling->allowed) {
          req.allowed = allowed;
          // top_k past the allowed count keeps masked tokens of probability 0: the same draw with top_k cut to the
          // count, and the device then never walks the crowd of -inf logits (backend/cuda/sampling.cu).
          if (req.pick->top_k > 0) req.pick->top_k = std::min(req.pick->top_k, allowed_count(*allowed, vocab));
        }
        pick_request[i] = static_cast<int64_t>(stage.rows.size());
      }
      if (req.raw_home || req.pick) stage.rows.push_back(std::move(req));
    }
    rows += count;
  }

  const model::StepLogits home = model_.run_step(chunks, stage, observe_);

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
