#pragma once
// Verification of speculative drafts (docs/mtp.md, "Speculative decoding in the engine"): the distribution a
// TokenPick draws from, written out over the vocabulary, and the acceptance rule of speculative sampling (Leviathan
// et al. 2023, Chen et al. 2023): a draft d drawn from q is kept with probability min(1, p(d) / q(d)); otherwise
// the token is drawn from norm(max(0, p − q)). The result is then a draw from p exactly, whatever q is, which is why
// the engine may draft with any distribution (the MTP layer's, or a point mass) as long as it says which.
#include <cstdint>
#include <span>
#include <vector>

#include "model/logits_stage.h"

namespace strata::engine {

// The probabilities cpu::pick_token draws `pick`'s token with from `logits` (penalties already applied): softmax at
// the pick's temperature over the tokens top-k, min-p and top-p keep (the same kept set, the same ties by id), 0
// elsewhere; a greedy pick is a point mass on the first maximum. Sums to 1 up to rounding.
std::vector<float> pick_distribution(std::span<const float> logits, const model::TokenPick& pick);

// The token a draw `uniform` ∈ [0, 1) selects from `dist` (non-negative, not necessarily normalised; walks ids in
// order). An all-zero `dist` selects its first maximum, so a caller never gets an id outside the vocabulary.
int32_t draw_from(std::span<const float> dist, double uniform);

struct DraftVerdict {
  bool accepted = false;
  int32_t token = 0;  // the draft when accepted, else the token drawn from the residual
};

// One draft `draft`, drawn from `q`, checked against the target distribution `p` (both over the vocabulary):
// accepted when u_accept · q(d) < p(d), else the residual draw `u_residual` from max(0, p − q). Where p − q has no
// positive mass (p == q to rounding), the residual falls back to p itself.
DraftVerdict verify_draft(std::span<const float> p, std::span<const float> q, int32_t draft, double u_accept,
                          double u_residual);

}  // namespace strata::engine
