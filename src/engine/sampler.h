#pragma once
// Token selection for one sequence: penalties, temperature, top-k / min-p / top-p filtering, and a draw from a
// counter-based random stream so a seeded request samples the same tokens however it is batched.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/sampling_params.h"
#include "model/logits_stage.h"

namespace strata::engine {

// Which tokens a sequence has seen, for the penalties: repetition looks at prompt and output, presence and
// frequency at the output only (OpenAI / vLLM semantics). A request without penalties keeps an untracked history:
// hashing every prompt and output token was ~40% of the engine's own time per token in the serving benchmark.
class TokenHistory {
 public:
  TokenHistory() = default;
  explicit TokenHistory(bool tracked) : tracked_(tracked) {}
  bool tracked() const { return tracked_; }
  void add_prompt(std::span<const int32_t> ids);
  void add_output(int32_t id);
  const std::unordered_set<int32_t>& seen() const { return seen_; }
  const std::unordered_map<int32_t, int32_t>& output_counts() const { return output_counts_; }

 private:
  bool tracked_ = true;
  std::unordered_set<int32_t> seen_;
  std::unordered_map<int32_t, int32_t> output_counts_;
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0;                              // of the chosen token under the model's raw distribution
  std::vector<std::pair<int32_t, float>> top;     // the `logprobs` most likely tokens, most likely first
};

// A uniform number in [0, 1) that depends only on (seed, counter): the request's seed and its output position.
double counter_uniform(uint64_t seed, uint64_t counter);

// The logit processors and the pick a sequence's next token gets (model/logits_stage.h), from its parameters, its
// token history and its draw (counter_uniform(seed, step); none when greedy). The model runner hands these to the
// backend, which applies them where the logits are.
model::RowPenalties penalties_of(const SamplingParams& params, const TokenHistory& history);
model::TokenPick pick_of(const SamplingParams& params, uint64_t seed, uint64_t step);

// The chosen token's logprob and the `top_n` most likely alternatives, from the raw (unprocessed) logits.
void add_logprobs(std::span<const float> raw_logits, int64_t top_n, SampledToken& token);

// The whole host path at once: penalties, pick and logprobs on one row. `step` is the index of the token being
// generated within its sequence; it selects the random draw. Logprobs are those of the unmodified logits, as vLLM
// reports them by default. The same token as the backends' sampling stage for the same row.
SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, const TokenHistory& history,
                          uint64_t seed, uint64_t step);

}  // namespace strata::engine
