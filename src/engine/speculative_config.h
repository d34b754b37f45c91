#pragma once
// The engine's speculative-decoding settings (docs/mtp.md, "Speculative decoding in the engine"): how many tokens
// the model's MTP layer drafts ahead, when a draft chain stops, and the planner's cost model.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>

namespace strata::engine {

struct Sequence;

struct SpeculativeConfig {
  // Draft tokens verified per decode step at most (0: off). The model's states must be able to drop that many
  // (load it with max_rollback ≥ tokens) and it must have an MTP layer.
  int64_t tokens = 0;
  static constexpr int64_t kMaxTokens = 8;
  // A draft chain stops at the first draft whose probability under the draft distribution is below this (greedy:
  // its softmax probability at temperature 1, after penalties).
  double min_prob = 0.1;
  // The planner's cost model (engine/draft_planner.h): a verify step costs this many rows' worth of fixed work
  // (reading the weights) plus one per row of the batch. Infinity: every draft is worth its row (verify them all).
  double step_cost_rows = 8.0;
  // How a sampled row (temperature > 0) checks its draft (greedy rows always check that the draft is their pick):
  //  Match: drafts are the draft layer's greedy picks, and a draft is accepted when it is the token the row draws
  //    with its own counter-based uniform, the token decoding without drafts would draw there. A point-mass draft
  //    d is then accepted with probability p(d), as rejection sampling would, and the output is the plain run's
  //    bit for bit: the same for any draft length, plan or batch (where the logits are). No row's distribution
  //    comes home.
  //  Rejection: speculative sampling's rule (engine/speculative_sampling.h) with drafts drawn from the draft
  //    distribution: accepts Σ min(p, q), more than p(argmax q) when q is spread like p, and keeps the output's
  //    distribution exact, but the tokens depend on which drafts were verified.
  enum class Verify { Match, Rejection };
  Verify verify = Verify::Match;
  // BENCHMARK ONLY (--speculative-forced-acceptance A): each verified draft is accepted with probability A (by its
  // own counter-based draw) instead of by the target's distribution, and a rejected one is replaced by the target's
  // pick; the drafter reports A as each draft's probability, so the planner plans for that rate. Measures the speed
  // of speculation at a chosen acceptance on random weights, whose drafts are never right. The output is then not
  // the model's: every figure taken with it is labelled (bench/run_speculative_flash_gpu.sh).
  std::optional<double> forced_acceptance;
  // The MTP catch-up after a verify step runs over the kept rows (--speculative-catch-up kept, the default) or over
  // every verified row (verified), the rejected ones as spare rows whose output is unused: its shape is then the
  // verify step's whatever was accepted, so a GPU replays one recording (CUDA graphs) instead of running most
  // catch-ups of a large batch eagerly, at the cost of the spare rows' compute. On an H100 at 64 sequences the spare
  // rows cost more than the recording saves (docs/mtp.md), hence the default. The drafts are the same either way
  // (each row's output depends on its own input and window only).
  bool catch_up_all_rows = false;
  // TEST ONLY: replaces each draft the MTP layer proposes with this function's token (drafts so far given), drafted
  // as a point mass; nullopt keeps the MTP layer's. Lets tests reach acceptance paths a random MTP head never does.
  std::function<std::optional<int32_t>(const Sequence&, std::span<const int32_t> drafts_so_far)> test_draft;
  bool enabled() const { return tokens > 0; }
};

}  // namespace strata::engine
