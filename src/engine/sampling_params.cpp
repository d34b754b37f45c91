#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/output_constraint.h"

namespace strata::engine {

void SamplingParams::validate(int64_t vocab_size) const {
  auto finite = [](double x) { return std::isfinite(x); };
  if (!finite(temperature) || temperature < 0) fail("temperature: expected a number ≥ 0, found ", temperature);
  if (!finite(top_p) || top_p <= 0 || top_p > 1) fail("top_p: expected a number in (0, 1], found ", top_p);
  if (top_k < 0) fail("top_k: expected 0 (off) or a positive count, found ", top_k);
  if (!finite(min_p) || min_p < 0 || min_p > 1) fail("min_p: expected a number in [0, 1], found ", min_p);
  if (!finite(presence_penalty) || presence_penalty < -2 || presence_penalty > 2)
    fail("presence_penalty: expected a number in [-2, 2], found ", presence_penalty);
  if (!finite(frequency_penalty) || frequency_penalty < -2 || frequency_penalty > 2)
    fail("frequency_penalty: expected a number in [-2, 2], found ", frequency_penalty);
  if (!finite(repetition_penalty) || repetition_penalty <= 0)
    fail("repetition_penalty: expected a number > 0, found ", repetition_penalty);
  if (max_tokens < 0) fail("max_tokens: expected a count ≥ 0, found ", max_tokens);
  if (n < 1) fail("n: expected a count ≥ 1, found ", n);
  if (logprobs && (*logprobs < 0 || *logprobs > 20)) fail("logprobs: expected a count in [0, 20], found ", *logprobs);
  for (int32_t id : stop_token_ids)
    if (id < 0 || id >= vocab_size) fail("stop_token_ids: token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
  for (const auto& [id, amount] : logit_bias) {
    if (id < 0 || id >= vocab_size) fail("logit_bias: token id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
    if (!std::isfinite(amount) || amount < -100 || amount > 100)
      fail("logit_bias: the bias of token ", id, " must be a number in [-100, 100], found ", amount);
  }
  // One entry per id: the device adds every entry of a row in parallel, and two on one logit would race.
  std::vector<int32_t> ids;
  for (const auto& entry : logit_bias) ids.push_back(entry.first);
  std::sort(ids.begin(), ids.end());
  if (const auto twin = std::adjacent_find(ids.begin(), ids.end()); twin != ids.end())
    fail("logit_bias: token id ", *twin, " is given twice");
  if (constraint) constraint->validate(vocab_size);
  for (const std::string& s : stop)
    if (s.empty()) fail("stop: stop strings must not be empty");
}

}  // namespace strata::engine
