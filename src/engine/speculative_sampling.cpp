#include "engine/speculative_sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace strata::engine {

std::vector<float> pick_distribution(std::span<const float> logits, const model::TokenPick& p) {
  std::vector<float> out(logits.size(), 0.0f);
  if (logits.empty()) fail("pick_distribution: an empty logits row");
  if (p.greedy()) {
    out[static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())] = 1.0f;
    return out;
  }
  // The same kept set as cpu::pick_token (backend/cpu/sampling.cpp): candidates in likelihood order, ties by id;
  // top-k, then min-p relative to the most likely token (probability 1 at the top), then the smallest top-p prefix.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  const double inv_t = 1.0 / p.temperature, top = logits[static_cast<size_t>(order[0])];
  size_t keep = order.size();
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  std::vector<double> prob(keep);
  for (size_t i = 0; i < keep; ++i) prob[i] = std::exp((logits[static_cast<size_t>(order[i])] - top) * inv_t);
  if (p.min_p > 0) {
    size_t above = 0;
    for (size_t i = 0; i < keep; ++i) above += prob[i] >= p.min_p;
    // Probabilities fall along the order, so the ones at or above min_p are a prefix of it.
    keep = std::max<size_t>(above, 1);
  }
  if (p.top_p < 1.0) {
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += prob[i];
    double mass = 0;
    size_t k = 0;
    while (k < keep && mass < p.top_p * total) mass += prob[k++];
    keep = std::max<size_t>(k, 1);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob[i];
  for (size_t i = 0; i < keep; ++i) out[static_cast<size_t>(order[i])] = static_cast<float>(prob[i] / total);
  return out;
}

int32_t draw_from(std::span<const float> dist, double uniform) {
  if (dist.empty()) fail("draw_from: an empty distribution");
  double total = 0;
  for (float x : dist) total += x;
  if (!(total > 0)) return static_cast<int32_t>(std::max_element(dist.begin(), dist.end()) - dist.begin());
  const double target = uniform * total;
  double acc = 0;
  int32_t last = 0;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (dist[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    if ((acc += dist[i]) > target) return last;
  }
  return last;  // rounding left the target past the total: the last token with mass
}

DraftVerdict verify_draft(std::span<const float> p, std::span<const float> q, int32_t draft, double u_accept,
                          double u_residual) {
  if (p.size() != q.size()) fail("verify_draft: target and draft distributions differ in size (", p.size(), " vs ", q.size(), ")");
  if (draft < 0 || static_cast<size_t>(draft) >= p.size())
    fail("verify_draft: draft token ", draft, " is outside the vocabulary [0, ", p.size(), ")");
  const auto d = static_cast<size_t>(draft);
  // u < p/q without dividing (q(d) > 0 for a draft drawn from q; q(d) = 0 accepts only if p(d) > 0).
  if (u_accept * static_cast<double>(q[d]) < static_cast<double>(p[d])) return {true, draft};
  std::vector<float> residual(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) mass += residual[i] = std::max(0.0f, p[i] - q[i]);
  if (!(mass > 0)) return {false, draw_from(p, u_residual)};
  return {false, draw_from(residual, u_residual)};
}

}  // namespace strata::engine
