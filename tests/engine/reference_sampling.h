#pragma once
// The sampler's filters written the slow, obvious way, shared by the pick tests (pick_test.cpp, masked_pick_test.cpp):
// sort the candidates most likely first (ties by id), keep the top_k, then those with probability ≥ min_p of the top
// one, then the shortest prefix reaching top_p of their mass; probabilities ∝ exp(logit / T) over what is kept.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace strata::test {

struct ReferenceFilter {
  std::vector<int32_t> order;  // the candidates, most likely first
  size_t keep = 0;             // order[0 .. keep) survive the filters
  double total = 0;            // their unnormalized mass
  double top = 0, inv_t = 1;
  const std::vector<float>* logits = nullptr;
  // Unnormalized probability of id (relative to the most likely candidate).
  double prob(int32_t id) const { return std::exp(((*logits)[static_cast<size_t>(id)] - top) * inv_t); }
};

// `candidates` non-empty; top_k 0 and top_p 1 and min_p 0 turn their filter off.
inline ReferenceFilter reference_filter(const std::vector<float>& logits, std::vector<int32_t> candidates,
                                        double temperature, int64_t top_k, double top_p, double min_p) {
  ReferenceFilter f;
  f.logits = &logits;
  f.order = std::move(candidates);
  std::stable_sort(f.order.begin(), f.order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  f.top = logits[f.order[0]];
  f.inv_t = 1.0 / temperature;
  const size_t n = f.order.size();
  size_t keep = top_k > 0 ? std::min(n, static_cast<size_t>(top_k)) : n;
  if (min_p > 0) {
    size_t above = 0;
    while (above < keep && f.prob(f.order[above]) >= min_p) ++above;
    keep = std::max<size_t>(above, 1);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += f.prob(f.order[i]);
  if (top_p < 1) {
    double mass = 0;
    size_t k = 0;
    while (k < keep && mass < top_p * total) mass += f.prob(f.order[k++]);
    keep = std::max<size_t>(k, 1);
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += f.prob(f.order[i]);
  }
  f.keep = keep;
  f.total = total;
  return f;
}

}  // namespace strata::test
