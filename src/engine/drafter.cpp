#include "engine/drafter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "backend/cpu/sampling.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/speculative_sampling.h"

namespace strata::engine {

namespace {

// Output positions stay far below 2^56, so the stream number in the top byte keeps the draws apart.
double stream_uniform(uint64_t seed, uint64_t index, uint64_t stream) { return counter_uniform(seed, index | (stream << 56)); }

// One chain's drafting state while the steps run.
struct Chain {
  DraftJob* job;
  model::SequenceState* state;
  TokenHistory history;  // the sequence's, with the drafts so far
  Mat streams;           // the MTP layer's output streams of the last row
  int64_t spare = 0;     // spare rows of its catch-up (DraftJob::spare), dropped from the MTP ring once it ran
  bool going = true;
  std::shared_ptr<const model::TokenMask> mask;  // what the grammar allows the next draft to be (null: anything)
};

}  // namespace

double draft_uniform(uint64_t seed, uint64_t index) { return stream_uniform(seed, index, 1); }
double accept_uniform(uint64_t seed, uint64_t index) { return stream_uniform(seed, index, 2); }
double residual_uniform(uint64_t seed, uint64_t index) { return stream_uniform(seed, index, 3); }

Drafter::Drafter(const model::Model& model, model::StatePool& pool, const SpeculativeConfig& config)
    : model_(model), pool_(pool), cfg_(config) {}

DraftStats Drafter::draft(std::vector<DraftJob>& jobs) {
  DraftStats stats;
  // A constrained chain's next draft is drawn under the grammar after its drafts so far; a chain whose drafts the
  // grammar refuses (a test's forced draft) or has ended stops: nothing after is ever verified.
  const auto under_grammar = [&](Chain& ch) {
    Sequence& s = *ch.job->seq;
    if (!s.constrained) return true;
    const auto start = std::chrono::steady_clock::now();
    const int64_t built = s.constrained->masks_built();
    auto mask = s.constrained->mask_after(s.spec.tokens);
    stats.masks += s.constrained->masks_built() - built;
    stats.mask_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!mask) return false;
    ch.mask = std::move(*mask);
    return true;
  };
  std::vector<Chain> chains;
  std::vector<model::DraftChunk> chunks;
  for (DraftJob& job : jobs) {
    Sequence& s = *job.seq;
    s.spec.clear_drafts();
    if (job.max_drafts <= 0 || job.streams.rows == 0) continue;
    model::SequenceState& state = pool_.slot(s.slot);
    int64_t& at = state.mtp_tokens.at(0);
    if (at > job.first) state.rollback_mtp(0, job.first);
    else at = job.first;
    model::DraftChunk c;
    c.streams = std::move(job.streams);
    for (int64_t p = job.first; p < job.first + c.streams.rows; ++p) c.tokens.push_back(s.token_at(p + 1));
    const int64_t spare = job.spare.rows;
    if (spare > 0) {
      if (job.spare.cols != c.streams.cols || static_cast<int64_t>(job.spare_next.size()) != spare)
        fail("drafter: sequence ", s.request_id, " has ", spare, " spare catch-up rows of ", job.spare.cols,
             " columns with ", job.spare_next.size(), " tokens (its streams have ", c.streams.cols, ")");
      c.logits_row = c.streams.rows - 1;
      c.streams.v.insert(c.streams.v.end(), job.spare.v.begin(), job.spare.v.end());
      c.streams.rows += spare;
      c.tokens.insert(c.tokens.end(), job.spare_next.begin(), job.spare_next.end());
    }
    c.state = &state;
    chains.push_back({&job, &state, s.history, {}, spare, true, nullptr});
    if (!under_grammar(chains.back())) {
      chains.pop_back();
      continue;
    }
    chunks.push_back(std::move(c));
  }
  // Under Verify::Match every draft is the layer's greedy pick (the likeliest to be the row's own draw); only
  // rejection sampling drafts from the distribution.
  const auto greedy_draft = [&](const Sequence& s) {
    return s.params.greedy() || cfg_.verify == SpeculativeConfig::Verify::Match;
  };
  int64_t& proposed = stats.proposed;
  while (!chunks.empty()) {
    // One logits row per chunk (its last). A greedy chain's draft is picked where the logits are, with the pick's
    // probability (its confidence) beside it: only an id and a float come home. A sampled chain needs the whole
    // processed distribution (verification compares it with the target's), so its raw row comes home and is
    // processed here, exactly as the verify step processes the target's; so does a greedy chain with penalties
    // under a reduced draft vocabulary (the device's penalties index the whole vocabulary). With a reduced draft
    // vocabulary the logits' columns are its ids (model::Model::draft_vocabulary): a raw row is spread over the
    // vocabulary, -inf elsewhere, before it is processed, so every draft distribution is over token ids.
    const std::vector<int32_t>& subset = model_.draft_vocabulary();
    const int64_t vocab = model_.config().vocab_size;
    std::vector<Chain*> going;
    for (Chain& ch : chains) if (ch.going) going.push_back(&ch);
    std::vector<bool> on_device(going.size());
    model::LogitsStage stage;
    for (size_t c = 0; c < going.size(); ++c) {
      const Sequence& s = *going[c]->job->seq;
      // (A grammar mask indexes the whole vocabulary too, so under a reduced one it is applied here.)
      on_device[c] = greedy_draft(s) && (subset.empty() || (!s.params.processes_logits() && !going[c]->mask));
      model::LogitsRowRequest req{static_cast<int64_t>(c), !on_device[c], {}, std::nullopt, nullptr};
      if (on_device[c]) {
        if (s.params.processes_logits()) req.penalties = penalties_of(s.params, going[c]->history);
        req.pick = model::TokenPick{};
        req.top_probability = true;
        req.allowed = going[c]->mask;
      }
      stage.rows.push_back(std::move(req));
    }
    const model::DraftOutput out = model_.run_draft(chunks, stage, 0);
    for (Chain* ch : going)
      if (ch->spare > 0) {
        ch->state->rollback_mtp(0, ch->state->mtp_tokens.at(0) - ch->spare);
        ch->spare = 0;
      }
    for (size_t c = 0, raw = 0; c < going.size(); ++c) {
      Chain& ch = *going[c];
      Sequence& s = *ch.job->seq;
      const uint64_t index = s.output.size() + s.spec.tokens.size();
      int32_t id = 0;
      float prob = 1.0f;
      std::vector<float> q;
      if (on_device[c]) {
        const int32_t column = out.logits.picks[c];
        id = subset.empty() ? column : subset[static_cast<size_t>(column)];
        prob = out.logits.top_probs[c];
      } else {
        const float* row = out.logits.raw.row(static_cast<int64_t>(raw++));
        std::vector<float> work;
        if (subset.empty()) {
          work.assign(row, row + vocab);
        } else {
          work.assign(static_cast<size_t>(vocab), -std::numeric_limits<float>::infinity());
          for (size_t k = 0; k < subset.size(); ++k) work[static_cast<size_t>(subset[k])] = row[k];
        }
        if (s.params.processes_logits()) cpu::apply_penalties(work, penalties_of(s.params, ch.history));
        if (ch.mask) cpu::apply_mask(work, *ch.mask);
        if (greedy_draft(s)) {
          id = cpu::pick_token(work, model::TokenPick{});
          prob = cpu::top_probability(work);
        } else {
          q = pick_distribution(work, pick_of(s.params, s.seed, index));
          id = draw_from(q, draft_uniform(s.seed, index));
          prob = q[static_cast<size_t>(id)];
        }
      }
      if (cfg_.test_draft)
        if (const std::optional<int32_t> forced = cfg_.test_draft(s, s.spec.tokens)) {
          id = *forced;
          prob = 1.0f;
          q.clear();  // a point mass on the forced token
        }
      if (cfg_.forced_acceptance) prob = static_cast<float>(*cfg_.forced_acceptance);  // what the planner plans for
      if (prob < cfg_.min_prob) {
        ch.going = false;
        continue;
      }
      s.spec.tokens.push_back(id);
      s.spec.probs.push_back(prob);
      s.spec.dists.push_back(std::move(q));
      ++proposed;
      ch.history.add_output(id);
      // A draft that would end the sequence (EOS, a stop id) ends the chain: nothing after it is ever emitted.
      const auto& eos = model_.config().eos_token_ids;
      const bool ends = std::find(s.params.stop_token_ids.begin(), s.params.stop_token_ids.end(), id) !=
                            s.params.stop_token_ids.end() ||
                        (!s.params.ignore_eos && std::find(eos.begin(), eos.end(), id) != eos.end());
      if (ends || static_cast<int64_t>(s.spec.tokens.size()) >= ch.job->max_drafts) ch.going = false;
      ch.streams = Mat(1, out.streams.cols);
      std::copy(out.streams.row(static_cast<int64_t>(c)), out.streams.row(static_cast<int64_t>(c)) + out.streams.cols, ch.streams.v.begin());
    }
    // The next position of each chain still going: the layer's own streams with the token it drafted.
    chunks.clear();
    for (Chain& ch : chains) {
      if (ch.going && !under_grammar(ch)) ch.going = false;
      if (ch.going) chunks.push_back({ch.streams, {ch.job->seq->spec.tokens.back()}, ch.state, false});
    }
  }
  return stats;
}

}  // namespace strata::engine
