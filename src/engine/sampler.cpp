#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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

// Candidate token ids in the order "most likely first" (ties by id: a total order, so the draw is fully
// determined), restricted to the `keep` most likely. A draw walks this order and usually stops early, so the order
// is sorted a chunk at a time (selection, then a sort of the chunk) rather than the whole vocabulary per token.
class CandidateOrder {
  struct MoreLikely {
    const std::vector<float>* logits;
    bool operator()(int32_t a, int32_t b) const {
      const float la = (*logits)[static_cast<size_t>(a)], lb = (*logits)[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    }
  };

 public:
  CandidateOrder(const std::vector<float>& logits, size_t keep) : logits_(logits), order_(logits.size()), keep_(keep) {
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
  MoreLikely more_likely() const { return {&logits_}; }
  const std::vector<float>& logits_;
  std::vector<int32_t> order_;
  size_t keep_, sorted_ = 0;
};

// The choice among the (penalised) logits `work`: the first maximum when greedy, else the draw `uniform` ∈ [0, 1)
// over the filtered, tempered distribution.
int32_t choose(const std::vector<float>& work, const SamplingParams& p, double uniform) {
  if (p.greedy()) return static_cast<int32_t>(std::max_element(work.begin(), work.end()) - work.begin());  // first maximum
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
  const double target = uniform * total;
  const bool sorted_walk = p.top_p < 1.0 || keep < work.size();
  int32_t id = 0;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    id = sorted_walk ? order.at(i) : order.unsorted(i);
    if ((acc += prob[static_cast<size_t>(id)]) > target) break;
  }
  return id;
}

}  // namespace

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p, const TokenHistory& history,
                          uint64_t seed, uint64_t step) {
  if (p.uses_history() && !history.tracked()) fail("sample_token: penalties asked of an untracked token history");
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
  out.id = choose(work, p, p.greedy() ? 0.0 : counter_uniform(seed, step));
  if (p.logprobs) fill_logprobs(logits, *p.logprobs, out);
  return out;
}

int32_t pick_token(std::span<const float> logits, const model::v4::PickParams& pick) {
  SamplingParams p;
  p.temperature = pick.temperature;
  p.top_k = pick.top_k;
  p.top_p = pick.top_p;
  p.min_p = pick.min_p;
  return choose(std::vector<float>(logits.begin(), logits.end()), p, pick.uniform);
}

}  // namespace strata::engine
