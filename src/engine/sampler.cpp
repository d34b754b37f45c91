#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata::engine {

void TokenHistory::add_prompt(std::span<const int32_t> ids) { seen_.insert(ids.begin(), ids.end()); }

void TokenHistory::add_output(int32_t id) {
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

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p, const TokenHistory& history,
                          uint64_t seed, uint64_t step) {
  std::vector<float> work(logits.begin(), logits.end());
  if (p.repetition_penalty != 1.0) {
    const auto rp = static_cast<float>(p.repetition_penalty);
    for (int32_t id : history.seen()) {
      float& l = work[static_cast<size_t>(id)];
      l = l > 0 ? l / rp : l * rp;
    }
  }
  if (p.presence_penalty != 0.0 || p.frequency_penalty != 0.0)
    for (const auto& [id, count] : history.output_counts())
      work[static_cast<size_t>(id)] -= static_cast<float>(p.presence_penalty + p.frequency_penalty * count);

  SampledToken out;
  if (p.greedy()) {
    out.id = static_cast<int32_t>(std::max_element(work.begin(), work.end()) - work.begin());  // first maximum
  } else {
    // Candidates sorted most likely first (ties by id, so the order is fully determined).
    std::vector<int32_t> order(work.size());
    std::iota(order.begin(), order.end(), 0);
    auto more_likely = [&](int32_t a, int32_t b) {
      return work[static_cast<size_t>(a)] > work[static_cast<size_t>(b)] || (work[static_cast<size_t>(a)] == work[static_cast<size_t>(b)] && a < b);
    };
    size_t keep = order.size();
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
      keep = static_cast<size_t>(p.top_k);
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), more_likely);
    } else {
      std::sort(order.begin(), order.end(), more_likely);
    }
    // Probabilities at temperature T over the kept candidates.
    const double inv_t = 1.0 / p.temperature, top_logit = work[static_cast<size_t>(order[0])];
    std::vector<double> prob(keep);
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += prob[i] = std::exp((work[static_cast<size_t>(order[i])] - top_logit) * inv_t);
    if (p.min_p > 0) {  // prob[0] is the largest
      size_t k = 1;
      while (k < keep && prob[k] >= p.min_p * prob[0]) ++k;
      keep = k;
    }
    if (p.top_p < 1.0) {  // smallest prefix whose mass reaches top_p (always at least one token)
      double mass = 0, kept_total = 0;
      for (size_t i = 0; i < keep; ++i) kept_total += prob[i];
      size_t k = 0;
      while (k < keep && mass < p.top_p * kept_total) mass += prob[k++];
      keep = std::max<size_t>(k, 1);
    }
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += prob[i];
    const double target = counter_uniform(seed, step) * total;
    double acc = 0;
    out.id = order[keep - 1];
    for (size_t i = 0; i < keep; ++i)
      if ((acc += prob[i]) > target) {
        out.id = order[i];
        break;
      }
  }
  if (p.logprobs) fill_logprobs(logits, *p.logprobs, out);
  return out;
}

}  // namespace strata::engine
