#include "backend/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace strata::cpu {

namespace {

// Candidate token ids in the order "most likely first" (ties by id: a total order, so the draw is fully
// determined), restricted to the `keep` most likely. A draw walks this order and usually stops early, so the order
// is sorted a chunk at a time (selection, then a sort of the chunk) rather than the whole vocabulary per token.
class CandidateOrder {
  struct MoreLikely {
    std::span<const float> logits;
    bool operator()(int32_t a, int32_t b) const {
      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    }
  };

 public:
  CandidateOrder(std::span<const float> logits, size_t keep) : logits_(logits), order_(logits.size()), keep_(keep) {
    std::iota(order_.begin(), order_.end(), 0);
    if (keep_ >= order_.size()) return;
    const auto mid = order_.begin() + static_cast<std::ptrdiff_t>(keep_);
    if (keep_ <= 1024) {  // a small top_k: a heap pass over the vocabulary leaves the kept ones sorted
      std::partial_sort(order_.begin(), mid, order_.end(), more_likely());
      sorted_ = keep_;
    } else {
      std::nth_element(order_.begin(), mid, order_.end(), more_likely());
    }
  }
  // The i-th most likely candidate (i < keep).
  int32_t at(size_t i) {
    if (i >= sorted_) {
      // The first 256 (usually enough: likelihood is concentrated), else everything kept in one sort.
      const size_t n = sorted_ == 0 ? std::min(keep_, std::max(i + 1, size_t{256})) : keep_;
      const auto first = order_.begin() + static_cast<std::ptrdiff_t>(sorted_), mid = order_.begin() + static_cast<std::ptrdiff_t>(n);
      if (n < keep_) std::nth_element(first, mid, order_.begin() + static_cast<std::ptrdiff_t>(keep_), more_likely());
      std::sort(first, mid, more_likely());
      sorted_ = n;
    }
    return order_[i];
  }
  // Keeps only the `keep` most likely of the kept candidates (before any at()).
  void restrict(size_t keep) {
    if (keep >= keep_) return;
    std::nth_element(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep), order_.begin() + static_cast<std::ptrdiff_t>(keep_), more_likely());
    keep_ = keep;
    sorted_ = 0;
  }
  // Some kept candidate: unsorted(0 .. keep-1) lists each exactly once, in no particular order.
  int32_t unsorted(size_t i) const { return order_[i]; }

 private:
  MoreLikely more_likely() const { return {logits_}; }
  std::span<const float> logits_;
  std::vector<int32_t> order_;
  size_t keep_, sorted_ = 0;
};

}  // namespace

void apply_penalties(std::span<float> logits, const model::RowPenalties& p) {
  for (const auto& [id, amount] : p.bias) logits[static_cast<size_t>(id)] += amount;
  if (p.repetition != 1.0f)
    for (int32_t id : p.seen) {
      float& l = logits[static_cast<size_t>(id)];
      l = l > 0 ? l / p.repetition : l * p.repetition;
    }
  for (const auto& [id, amount] : p.subtract) logits[static_cast<size_t>(id)] -= amount;
}

void apply_mask(std::span<float> logits, const model::TokenMask& allowed) {
  constexpr float kNever = -std::numeric_limits<float>::infinity();
  const size_t covered = std::min(logits.size(), allowed.size() * 32);
  // A word at a time: grammar masks are mostly all-clear or all-set words, which cost one test each.
  for (size_t w = 0; w * 32 < covered; ++w) {
    const uint32_t word = allowed[w];
    if (word == ~0u && (w + 1) * 32 <= covered) continue;
    const size_t end = std::min(covered, (w + 1) * 32);
    for (size_t id = w * 32; id < end; ++id)
      if (!((word >> (id % 32)) & 1u)) logits[id] = kNever;
  }
  for (size_t id = covered; id < logits.size(); ++id) logits[id] = kNever;
}

float top_probability(std::span<const float> logits) {
  if (logits.empty()) return 0.0f;
  const float top = *std::max_element(logits.begin(), logits.end());
  if (!std::isfinite(top)) return 0.0f;
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l) - static_cast<double>(top));
  return static_cast<float>(1.0 / z);
}

// The first maximum when greedy, else the draw `uniform` ∈ [0, 1) over the filtered, tempered distribution.
int32_t pick_token(std::span<const float> work, const model::TokenPick& p) {
  if (p.greedy()) return static_cast<int32_t>(std::max_element(work.begin(), work.end()) - work.begin());
  // The kept candidates: the top_k most likely, and of those the ones with probability ≥ min_p times the top
  // one's. Probabilities at temperature T are relative to the most likely token (which gets exactly 1) and computed
  // for kept candidates only.
  const double inv_t = 1.0 / p.temperature, top_logit = *std::max_element(work.begin(), work.end());
  size_t keep = work.size();
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  CandidateOrder order(work, keep);
  std::vector<double> prob(work.size());
  size_t above_min_p = 0;
  for (size_t i = 0; i < keep; ++i) {
    const auto id = static_cast<size_t>(order.unsorted(i));
    prob[id] = std::exp((work[id] - top_logit) * inv_t);
    above_min_p += prob[id] >= p.min_p;
  }
  if (p.min_p > 0) {
    keep = std::max<size_t>(above_min_p, 1);
    order.restrict(keep);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob[static_cast<size_t>(order.unsorted(i))];
  if (p.top_p < 1.0) {  // smallest prefix whose mass reaches top_p (always at least one token)
    const double kept_total = total;
    double mass = 0;
    size_t k = 0;
    while (k < keep && mass < p.top_p * kept_total) mass += prob[static_cast<size_t>(order.at(k++))];
    keep = std::max<size_t>(k, 1);
    total = 0;
    for (size_t i = 0; i < keep; ++i) total += prob[static_cast<size_t>(order.at(i))];
  }
  // The draw: the first candidate whose running mass passes u · total, walking a fixed order of the kept set. Any
  // fixed order gives the same distribution; this one is the cheapest that is fully determined (so a backend can
  // pick the same token, see backend/cuda/sampling.cu): when nothing was filtered out, the vocabulary in id order
  // (no sort at all); with top_p or when something was filtered out, the kept set in likelihood order (ties by id).
  const double target = p.uniform * total;
  const bool sorted_walk = p.top_p < 1.0 || keep < work.size();
  int32_t id = 0;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    id = sorted_walk ? order.at(i) : order.unsorted(i);
    if ((acc += prob[static_cast<size_t>(id)]) > target) break;
  }
  return id;
}

}  // namespace strata::cpu
