#pragma once
// The sampling stage's ops on the CPU, the readable reference of what every backend does to a logits row
// (model/logits_stage.h): the logit processors (penalties), the allowed-token mask and the pick. The engine's host sampler
// (engine/sampler.h) is built from the same two functions, so a pick made on any backend is the token the host
// would have chosen.
#include <cstdint>
#include <span>

#include "model/logits_stage.h"

namespace strata::cpu {

// The penalties applied to `logits` in place (repetition over `seen`, then the subtracted amounts).
void apply_penalties(std::span<float> logits, const model::RowPenalties& penalties);

// Every token `allowed` does not allow gets -inf (model::TokenMask's layout; ids past its last word included).
void apply_mask(std::span<float> logits, const model::TokenMask& allowed);

// The token `pick` chooses from `logits` (model::TokenPick says how).
int32_t pick_token(std::span<const float> logits, const model::TokenPick& pick);

// The probability of the most likely token under softmax(logits) at temperature 1: 1 / Σ exp(l − max), in double
// (-inf logits count 0; a row without a finite maximum answers 0). What a greedy MTP draft's confidence is
// (LogitsRowRequest::top_probability).
float top_probability(std::span<const float> logits);

}  // namespace strata::cpu
