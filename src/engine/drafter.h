#pragma once
// The draft side of speculative decoding (docs/mtp.md): the model's MTP layer catches up on the positions the main
// model has just computed and chains drafts for the positions after the sequence's last token. MTP row p joins the
// main model's last-layer streams of position p with the token at p + 1 and drafts the token at p + 2; chained rows
// feed the layer's own output streams back with the token it drafted.
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "engine/sequence.h"
#include "engine/speculative_config.h"
#include "model/model.h"
#include "model/state_pool.h"

namespace strata::engine {

// One sequence's draft work after a step: the main model's streams of positions first.. (the MTP layer's catch-up
// rows: first + streams.rows − 1 is the position of the sequence's last computed token, whose next token, just
// sampled, is its last known one), and how many drafts it may use.
struct DraftJob {
  Sequence* seq = nullptr;
  int64_t first = 0;
  Mat streams;
  int64_t max_drafts = 0;
  // Spare catch-up rows after them (SpeculativeConfig::catch_up_all_rows): the streams of the positions the verify
  // step computed and rejected, with the token after each. They pad the catch-up to the verify step's shape; their
  // output is not used and their MTP-ring positions are dropped right after.
  Mat spare;
  std::vector<int32_t> spare_next;
};

// What one draft() did: drafts proposed, and the grammar masks it built for constrained chains (their cost).
struct DraftStats {
  int64_t proposed = 0;
  int64_t masks = 0;
  double mask_seconds = 0;
};

class Drafter {
 public:
  Drafter(const model::Model& model, model::StatePool& pool, const SpeculativeConfig& config);

  // Runs the catch-up rows of every job in one MTP step, then one step per further draft for the chains still
  // going; each job's sequence gets its drafts (SequenceDrafts::tokens, probs, dists; the old ones replaced). The MTP
  // state first drops the positions a previous chain drafted past `first` (SequenceState::rollback_mtp); a state
  // behind `first` (a restored prefix, a preempted sequence) skips ahead: the layer is window-only and each position's
  // window row depends only on its own row's input, so the last row still reads a window of computed rows once the
  // catch-up covers `window` positions. A sequence under a grammar (Sequence::constrained) drafts under it: each
  // draft step picks, or draws, among the tokens the grammar allows after the drafts so far
  // (ConstrainedOutput::mask_after), so a chain goes on through forced structure instead of being cut at the first
  // draft the grammar refuses; verification is unchanged (its rows are masked the same way).
  DraftStats draft(std::vector<DraftJob>& jobs);

 private:
  const model::Model& model_;
  model::StatePool& pool_;
  const SpeculativeConfig& cfg_;
};

// The draws of speculative decoding at output position `index` of a sequence with seed `seed`: the draft's, the
// verification's acceptance and residual draws — each its own stream of counter_uniform, none the target pick's.
double draft_uniform(uint64_t seed, uint64_t index);
double accept_uniform(uint64_t seed, uint64_t index);
double residual_uniform(uint64_t seed, uint64_t index);

}  // namespace strata::engine
