#pragma once
// How many of its drafts each decoding sequence verifies this step (speculative decoding, docs/mtp.md). A cost
// model kept simple on purpose: a step costs `step_cost_rows` (its fixed work, reading the weights) plus one per row
// of the batch, and draft j of a sequence is accepted with the product of its chain's draft probabilities up to j
// (the draft layer's own confidence, the only estimate there is before the target runs). The planner takes draft
// rows in decreasing order of that probability while each one raises the expected tokens per unit of step cost.
#include <cstdint>
#include <vector>

namespace strata::engine {

// `probs[i]`: sequence i's draft probabilities in chain order; `base_rows`: the rows the step has without drafts
// (each decoding sequence's one, prefill chunks); `base_tokens`: the tokens it yields without drafts. Answers, per
// sequence, how many of its drafts to verify (a prefix of its chain).
std::vector<int64_t> plan_drafts(const std::vector<std::vector<float>>& probs, int64_t base_rows, int64_t base_tokens,
                                 double step_cost_rows);

}  // namespace strata::engine
