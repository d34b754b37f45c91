#pragma once
// What a request asks of token selection (OpenAI / vLLM names). Validated once, at admission.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::engine {

struct OutputConstraint;  // engine/output_constraint.h

struct SamplingParams {
  double temperature = 1.0;        // 0 = greedy
  double top_p = 1.0;              // nucleus: keep the smallest set of tokens whose probability reaches top_p
  int64_t top_k = 0;               // 0 = off
  double min_p = 0.0;              // drop tokens below min_p × the most likely token's probability
  double presence_penalty = 0.0;   // subtracted once from tokens that appeared in the output
  double frequency_penalty = 0.0;  // subtracted per occurrence in the output
  double repetition_penalty = 1.0; // > 1 discourages tokens seen in prompt or output (divides positive logits)
  std::optional<uint64_t> seed;    // same seed → same tokens, whatever else runs in the batch
  int64_t max_tokens = 16;
  std::vector<std::string> stop;   // stop strings (not emitted)
  std::vector<int32_t> stop_token_ids;
  // OpenAI's logit_bias: amount in [-100, 100] added to the raw logit of a token id (distinct ids) before penalties,
  // temperature and filtering; -100 in effect bans a token, 100 all but forces it.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured outputs and tool_choice: the grammar the output follows and the tokens it may never hold (null: free
  // text). Shared by the request's sequences; each keeps its own position in the grammar.
  std::shared_ptr<const OutputConstraint> constraint;
  bool ignore_eos = false;
  std::optional<int64_t> logprobs;  // return the sampled token's logprob and this many top alternatives
  int64_t n = 1;                    // completions per request
  // Not part of the HTTP API: every raw logits row of the sequence comes back with its tokens (the prompt's with
  // the first token event, then each picked token's own row), for `strata generate --dump-logits`.
  bool capture_logits = false;

  // Throws strata::Error naming the first invalid parameter, e.g. "top_p: expected a number in (0, 1], found 0".
  void validate(int64_t vocab_size) const;
  bool greedy() const { return temperature == 0.0; }
  // Whether any penalty reads the sequence's token history (without one, the history need not be kept).
  bool uses_history() const {
    return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0;
  }
  // Whether the logits are processed before the pick (model::RowPenalties non-empty, given the history).
  bool processes_logits() const { return uses_history() || !logit_bias.empty(); }
};

}  // namespace strata::engine
