#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/sampling.h"
#include "core/error.h"

namespace strata::engine {

void TokenHistory::add_prompt(std::span<const int32_t> ids) {
  if (tracked_) seen_.insert(ids.begin(), ids.end());
}

void TokenHistory::add_output(int32_t id) {
  if (!tracked_) return;
  seen_.insert(id);
  ++output_counts_[id];
}

double counter_uniform(uint64_t seed, uint64_t counter) {
  // Two rounds of the splitmix64 finaliser over (seed, counter): a stateless hash, so any step's draw can be
  // computed without replaying earlier ones (needed when requests are preempted and resumed).
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t h = mix(mix(seed + 0x9e3779b97f4a7c15ull) ^ (counter * 0xd1b54a32d192ed03ull + 0x8cb92ba72f3d8dd7ull));
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

namespace {

// log-softmax of the raw logits for the chosen token and the top alternatives.
void fill_logprobs(std::span<const float> logits, int64_t top_n, SampledToken& out) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  const double log_z = static_cast<double>(max_logit) + std::log(sum);
  out.logprob = static_cast<float>(logits[static_cast<size_t>(out.id)] - log_z);
  if (top_n <= 0) return;
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto n = std::min<size_t>(static_cast<size_t>(top_n), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] || (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  for (size_t i = 0; i < n; ++i) out.top.emplace_back(idx[i], static_cast<float>(logits[static_cast<size_t>(idx[i])] - log_z));
}

}  // namespace

model::RowPenalties penalties_of(const SamplingParams& p, const TokenHistory& history) {
  if (p.uses_history() && !history.tracked()) fail("sampler: penalties asked of an untracked token history");
  model::RowPenalties out;
  out.bias = p.logit_bias;
  if (p.repetition_penalty != 1.0) {
    out.repetition = static_cast<float>(p.repetition_penalty);
    out.seen.assign(history.seen().begin(), history.seen().end());
  }
  if (p.presence_penalty != 0.0 || p.frequency_penalty != 0.0)
    for (const auto& [id, count] : history.output_counts())
      out.subtract.emplace_back(id, static_cast<float>(p.presence_penalty + p.frequency_penalty * count));
  return out;
}

model::TokenPick pick_of(const SamplingParams& p, uint64_t seed, uint64_t step) {
  if (p.greedy()) return {};
  return {p.temperature, p.top_k, p.top_p, p.min_p, counter_uniform(seed, step)};
}

void add_logprobs(std::span<const float> raw_logits, int64_t top_n, SampledToken& token) {
  fill_logprobs(raw_logits, top_n, token);
}

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p, const TokenHistory& history,
                          uint64_t seed, uint64_t step) {
  std::vector<float> work(logits.begin(), logits.end());
  cpu::apply_penalties(work, penalties_of(p, history));
  SampledToken out;
  out.id = cpu::pick_token(work, pick_of(p, seed, step));
  if (p.logprobs) fill_logprobs(logits, *p.logprobs, out);
  return out;
}

}  // namespace strata::engine
