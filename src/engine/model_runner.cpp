#include "engine/model_runner.h"

#include <algorithm>
#include <span>

#include "backend/cpu/sampling.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/speculative_sampling.h"

namespace strata::engine {

namespace {

// Speculative verification of a span's drafts (docs/mtp.md): draft j is checked against row j's distribution, in
// order, until one is rejected. Greedy rows, and sampled rows unless `rejection`, accept a draft that is their pick
// (so the output is the plain decode's: SpeculativeConfig::Verify::Match); with `rejection` sampled rows run
// speculative sampling's rule (engine/speculative_sampling.h) on the processed distribution the pick draws from.
// The accepted drafts, then the token of the first row not accepted (the residual draw on a rejection, else the
// last row's pick: the bonus token), go into `tokens`; answers how many were accepted.
// With a forced acceptance rate (benchmarks on random weights), draft j is accepted when its accept draw is below
// the rate, else the row's pick replaces it.
// Grammar masks (structured outputs) apply to the distribution checked as to the pick: the first row's is
// `first_mask` (a late mask), the others' their SpanSampling's.
template <class Pick, class Raw>
int64_t accept_drafts(const ScheduledSpan& span, const model::TokenMask* first_mask, const Pick& pick,
                      const Raw& raw_row, std::optional<double> forced, bool rejection, std::vector<int32_t>& tokens) {
  for (size_t j = 0; j < span.drafts.size(); ++j) {
    const DraftToken& d = span.drafts[j];
    const SpanSampling& row = j == 0 ? *span.sampling : span.drafts[j - 1].next;
    const model::TokenMask* mask = j == 0 ? (row.allowed ? row.allowed.get() : first_mask) : row.allowed.get();
    const auto r = static_cast<int64_t>(j);
    if (forced) {
      if (!(d.accept_uniform < *forced)) {
        tokens.push_back(pick(r));
        return r;
      }
    } else if (row.pick.greedy() || !rejection) {
      // The row's own pick (greedy, or drawn with the plain run's uniform) must be the draft.
      if (pick(r) != d.id) {
        tokens.push_back(pick(r));
        return r;
      }
    } else {
      std::vector<float> work(raw_row(r).begin(), raw_row(r).end());
      cpu::apply_penalties(work, row.penalties);
      if (mask) cpu::apply_mask(work, *mask);
      const std::vector<float> p = pick_distribution(work, row.pick);
      std::vector<float> point;
      if (d.q.empty()) {
        point.assign(p.size(), 0.0f);
        point[static_cast<size_t>(d.id)] = 1.0f;
      }
      const DraftVerdict v = verify_draft(p, d.q.empty() ? point : d.q, d.id, d.accept_uniform, d.residual_uniform);
      if (!v.accepted) {
        tokens.push_back(v.token);
        return r;
      }
    }
    tokens.push_back(d.id);
  }
  tokens.push_back(pick(static_cast<int64_t>(span.drafts.size())));
  return static_cast<int64_t>(span.drafts.size());
}

}  // namespace

ModelRunner::ModelRunner(const model::Model& model, model::StatePool& pool, model::LayerObserver observe)
    : model_(model), pool_(pool), observe_(std::move(observe)) {}

StepOutput ModelRunner::execute(const StepPlan& plan, const LateSpanMasks& late) {
  StepOutput out;
  if (plan.empty()) return out;
  const int64_t vocab = model_.config().vocab_size;
  std::vector<int64_t> late_index(plan.spans.size(), -1);  // span i's place among the late masks, or -1
  for (size_t k = 0; k < late.spans.size(); ++k) {
    const size_t i = late.spans[k];
    if (i >= plan.spans.size() || (k > 0 && i <= late.spans[k - 1]))
      fail("model runner: late masks for span ", i, ", out of order or outside the plan's ", plan.spans.size(), " spans");
    const ScheduledSpan& span = plan.spans[i];
    if (!span.sampling || span.sampling->allowed)
      fail("model runner: sequence ", span.sequence_id, " gets a late mask but ",
           span.sampling ? "has a mask already" : "does not sample");
    late_index[i] = static_cast<int64_t>(k);
  }
  if (!late.spans.empty() && !late.build) fail("model runner: late masks for ", late.spans.size(), " spans, but nothing builds them");

  // The model's chunks, and the sampling stage over their logits rows (numbered chunk after chunk: every row of an
  // all_logits span or of a span with drafts, else only its last). A span with drafts is its token and the drafts
  // after it, in one chunk: row j picks the token in draft j + 1's place (the verification's target).
  std::vector<model::SequenceChunk> chunks;
  chunks.reserve(plan.spans.size());
  model::LogitsStage stage;
  std::vector<int64_t> first_row(plan.spans.size()), first_pick(plan.spans.size(), -1), first_stream(plan.spans.size(), -1);
  int64_t rows = 0, step_rows = 0;
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const ScheduledSpan& span = plan.spans[i];
    model::SequenceState& state = pool_.slot(span.slot);
    if (state.num_tokens != span.start)
      fail("model runner: sequence ", span.sequence_id, " starts at token ", span.start, " but its state slot ",
           span.slot, " holds ", state.num_tokens);
    if (span.samples != span.sampling.has_value())
      fail("model runner: sequence ", span.sequence_id, span.samples ? " samples without" : " has sampling settings but does not sample",
           " sampling settings");
    const bool verifies = !span.drafts.empty();
    if (verifies && (!span.samples || span.tokens.size() != 1 || span.all_logits))
      fail("model runner: sequence ", span.sequence_id, " asks to verify ", span.drafts.size(),
           " drafts, but only a sampling decode span of one token without logits capture may");
    model::SequenceChunk chunk{span.tokens, &state, span.all_logits || verifies};
    for (const DraftToken& d : span.drafts) {
      if (d.id < 0 || d.id >= vocab) fail("model runner: sequence ", span.sequence_id, "'s draft token ", d.id, " is outside the vocabulary [0, ", vocab, ")");
      if (!d.q.empty() && static_cast<int64_t>(d.q.size()) != vocab)
        fail("model runner: sequence ", span.sequence_id, "'s draft distribution has ", d.q.size(), " entries for a vocabulary of ", vocab);
      chunk.tokens.push_back(d.id);
    }
    const auto span_rows = static_cast<int64_t>(chunk.tokens.size());
    if (span.streams_from >= 0) {
      first_stream[i] = static_cast<int64_t>(stage.stream_rows.size());
      for (int64_t r = std::max<int64_t>(0, span.streams_from - span.start); r < span_rows; ++r)
        stage.stream_rows.push_back(step_rows + r);
    }
    step_rows += span_rows;
    chunks.push_back(std::move(chunk));
    const int64_t count = chunks.back().all_logits ? span_rows : 1;
    first_row[i] = rows;
    for (int64_t r = 0; r < count; ++r) {
      // The sampling settings of this row: the span's own for its token's row, draft r's "next" after it.
      const int64_t pick_from = verifies ? r : r - (count - 1);
      const SpanSampling* sampling = !span.sampling || pick_from < 0 ? nullptr
                                     : pick_from == 0 ? &*span.sampling
                                                      : &span.drafts[static_cast<size_t>(pick_from - 1)].next;
      model::LogitsRowRequest req{rows + r, span.all_logits, {}, std::nullopt, nullptr};
      if (sampling) {
        // Sampling verification reads the target distribution of every row that checks a draft.
        const bool checks_sampled_draft =
            verifies && r < count - 1 && !sampling->pick.greedy() && !forced_acceptance_ && rejection_;
        req.raw_home = req.raw_home || sampling->logprobs.has_value() || checks_sampled_draft;
        req.penalties = sampling->penalties;
        req.pick = sampling->pick;
        req.allowed = sampling->allowed;
        // Late masks come in span order, which is the stage's row order (rows are numbered chunk after chunk). A
        // verify span's late mask is its first row's; the rows after its drafts bring their own.
        req.allowed_late = late_index[i] >= 0 && pick_from == 0;
        if (pick_from == 0) first_pick[i] = static_cast<int64_t>(stage.rows.size());
      }
      if (req.raw_home || req.pick) stage.rows.push_back(std::move(req));
    }
    rows += count;
  }

  // The late masks are kept as they are handed over: a sampled verification applies a verify span's first-row mask
  // to the distribution it checks the first draft against.
  std::vector<std::shared_ptr<const model::TokenMask>> built_late;
  if (!late.spans.empty())
    stage.late_masks = [&] {
      built_late = late.build();
      return built_late;
    };
  const model::StepLogits home = model_.run_step(chunks, stage, observe_);
  out.late_masks_hidden = home.late_masks_hidden;

  // Raw rows came home in request order; find each span's by its logits row.
  std::vector<int64_t> raw_index(static_cast<size_t>(rows), -1);
  for (int64_t r = 0, next = 0; r < static_cast<int64_t>(stage.rows.size()); ++r)
    if (stage.rows[r].raw_home) raw_index[stage.rows[r].row] = next++;
  auto raw_row = [&](int64_t logits_row) { return std::span<const float>(home.raw.row(raw_index[logits_row]), static_cast<size_t>(vocab)); };
  out.spans.reserve(plan.spans.size());
  for (size_t i = 0; i < plan.spans.size(); ++i) {
    const ScheduledSpan& span = plan.spans[i];
    SpanOutput o;
    o.sequence_id = span.sequence_id;
    const int64_t count = span.all_logits ? static_cast<int64_t>(span.tokens.size()) : 1;
    if (span.all_logits) {
      o.logits.reserve(static_cast<size_t>(count * vocab));
      for (int64_t r = 0; r < count; ++r) {
        const std::span<const float> row = raw_row(first_row[i] + r);
        o.logits.insert(o.logits.end(), row.begin(), row.end());
      }
    }
    if (first_pick[i] >= 0) {
      // The span's token rows' picks, request after request (with drafts: one per row, the span's token's first).
      const auto pick = [&](int64_t r) { return home.picks[static_cast<size_t>(first_pick[i] + r)]; };
      if (span.drafts.empty()) {
        o.tokens.push_back(pick(0));
      } else {
        const auto k = static_cast<size_t>(late_index[i]);
        const model::TokenMask* first_mask = late_index[i] >= 0 && k < built_late.size() ? built_late[k].get() : nullptr;
        o.accepted = accept_drafts(span, first_mask, pick, [&](int64_t r) { return raw_row(first_row[i] + r); },
                                   forced_acceptance_, rejection_, o.tokens);
        // The state keeps the span's token and the accepted drafts; the rows written for the others are dropped.
        if (o.accepted < static_cast<int64_t>(span.drafts.size()))
          model_.rollback(pool_.slot(span.slot), span.start + 1 + o.accepted);
      }
      if (span.sampling->logprobs)
        for (size_t t = 0; t < o.tokens.size(); ++t) {
          SampledToken st;
          st.id = o.tokens[t];
          const int64_t row = span.drafts.empty() ? count - 1 : static_cast<int64_t>(t);
          add_logprobs(raw_row(first_row[i] + row), *span.sampling->logprobs, st);
          if (t == 0) {
            o.logprob = st.logprob;
            o.top_logprobs = std::move(st.top);
          } else {
            o.later_logprobs.push_back({st.logprob, std::move(st.top)});
          }
        }
    }
    if (first_stream[i] >= 0) {
      // Positions streams_from onward of the rows the state kept.
      const int64_t from = std::max(span.streams_from, span.start);
      const int64_t kept_end = span.drafts.empty() ? span.end() : span.start + 1 + o.accepted;
      o.streams_from = from;
      o.streams = Mat(std::max<int64_t>(0, kept_end - from), home.streams.cols);
      if (o.streams.rows > 0)
        std::copy(home.streams.row(first_stream[i]), home.streams.row(first_stream[i]) + o.streams.rows * o.streams.cols,
                  o.streams.v.begin());
      const int64_t verified_end = span.end() + static_cast<int64_t>(span.drafts.size());
      if (keep_rejected_ && !span.drafts.empty() && kept_end < verified_end && kept_end >= from) {
        const int64_t first = first_stream[i] + (kept_end - from), n = verified_end - kept_end;
        o.rejected_streams = Mat(n, home.streams.cols);
        std::copy(home.streams.row(first), home.streams.row(first) + n * home.streams.cols, o.rejected_streams.v.begin());
        // Position kept_end + j is draft a + 1 + j's (0-based span.drafts[a + j]); its next token is the draft after.
        for (int64_t j = 0; j < n; ++j) {
          const auto next = static_cast<size_t>(std::min<int64_t>(o.accepted + j + 1, static_cast<int64_t>(span.drafts.size()) - 1));
          o.rejected_next.push_back(span.drafts[next].id);
        }
      }
    }
    out.spans.push_back(std::move(o));
  }
  return out;
}

}  // namespace strata::engine
