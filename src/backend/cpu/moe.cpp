// CpuBackend's MoE: the router (score function, hash or biased top-k) and the SwiGLU experts.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/official_numerics.h"
#include "backend/cpu/ops.h"

namespace strata::cpu {

using model::ModelConfig;
using model::ScoringFunc;
using namespace model::v4;

Mat CpuBackend::expert(const ExpertWeights& w, const Mat& x, double limit_d,
                       const std::vector<float>* row_weights) const {
  Mat g = product(x, w.w1);
  const Mat u = product(x, w.w3);
  const float limit = static_cast<float>(limit_d);
  for (size_t i = 0; i < g.v.size(); ++i) g.v[i] = silu(std::min(g.v[i], limit)) * std::clamp(u.v[i], -limit, limit);
  if (row_weights)
    for (int64_t r = 0; r < g.rows; ++r)
      for (int64_t c = 0; c < g.cols; ++c) g.at(r, c) *= (*row_weights)[static_cast<size_t>(r)];
  if (official_) official::round_bf16(g);  // w2's input is bf16 in DeepSeek's code
  return product(g, w.w2);
}

CpuBackend::Routing CpuBackend::route(Mat scores, const MoeWeights& w, const std::vector<int32_t>& tokens,
                                      const ModelConfig& cfg) const {
  const int64_t n = scores.rows, n_experts = cfg.n_routed_experts, k = cfg.num_experts_per_tok;
  for (int64_t s = 0; s < n; ++s) {
    float* r = scores.row(s);
    switch (cfg.scoring_func) {
      case ScoringFunc::SqrtSoftplus:
        for (int64_t e = 0; e < n_experts; ++e) r[e] = std::sqrt(softplus(r[e]));
        break;
      case ScoringFunc::Sigmoid:
        for (int64_t e = 0; e < n_experts; ++e) r[e] = sigmoid(r[e]);
        break;
      case ScoringFunc::Softmax:
        softmax(r, n_experts);
        break;
    }
  }
  Routing routed_to(static_cast<size_t>(n_experts));
  for (int64_t s = 0; s < n; ++s) {
    const float* r = scores.row(s);
    std::vector<int32_t> chosen(static_cast<size_t>(k));
    if (!w.tid2eid.empty()) {
      for (int64_t j = 0; j < k; ++j) chosen[j] = w.tid2eid[static_cast<size_t>(tokens[s] * k + j)];
    } else {
      std::vector<int32_t> idx(static_cast<size_t>(n_experts));
      std::iota(idx.begin(), idx.end(), 0);
      auto biased = [&](int32_t e) { return r[e] + (w.gate_bias.empty() ? 0.0f : w.gate_bias[e]); };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return biased(a) > biased(b) || (biased(a) == biased(b) && a < b);
      });
      std::copy(idx.begin(), idx.begin() + k, chosen.begin());
    }
    float sum = 0;
    for (int32_t e : chosen) sum += r[e];
    for (int32_t e : chosen)
      routed_to[e].emplace_back(s, r[e] / (sum + 1e-20f) * static_cast<float>(cfg.routed_scaling_factor));
  }
  return routed_to;
}

// Official numerics: DeepSeek's order, each routed expert's output (its route weight applied before w2) added in
// fp32 in expert order, then the shared expert's, then bf16.
Mat CpuBackend::official_experts(const Mat& x, const Routing& routing, const MoeWeights& w,
                                 const ModelConfig& cfg) const {
  const int64_t n = x.rows, d = x.cols;
  Mat sum(n, d);
  for (size_t e = 0; e < routing.size(); ++e) {
    const auto& rows = routing[e];
    if (rows.empty()) continue;
    Mat xe(static_cast<int64_t>(rows.size()), d);
    std::vector<float> weights(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      std::copy(x.row(rows[i].first), x.row(rows[i].first) + d, xe.row(static_cast<int64_t>(i)));
      weights[i] = rows[i].second;
    }
    const Mat ye = expert(w.experts[e], xe, cfg.swiglu_limit, &weights);
    for (size_t i = 0; i < rows.size(); ++i) {
      float* dst = sum.row(rows[i].first);
      for (int64_t c = 0; c < d; ++c) dst[c] += ye.at(static_cast<int64_t>(i), c);
    }
  }
  if (w.shared) {
    const Mat ys = expert(*w.shared, x, cfg.swiglu_limit);
    for (size_t i = 0; i < sum.v.size(); ++i) sum.v[i] += ys.v[i];
  }
  official::round_bf16(sum);
  return sum;
}

Mat CpuBackend::experts(const Mat& x, const Routing& routing, const MoeWeights& w, const ModelConfig& cfg) const {
  const int64_t n = x.rows, d = x.cols;
  routed_experts_.push_back(
      std::count_if(routing.begin(), routing.end(), [](const auto& rows) { return !rows.empty(); }));
  if (official_) return official_experts(x, routing, w, cfg);
  Mat out = w.shared ? expert(*w.shared, x, cfg.swiglu_limit) : Mat(n, d);
  Mat routed(n, d);
  for (size_t e = 0; e < routing.size(); ++e) {
    const auto& rows = routing[e];
    if (rows.empty()) continue;
    Mat xe(static_cast<int64_t>(rows.size()), d);
    for (size_t i = 0; i < rows.size(); ++i) std::copy(x.row(rows[i].first), x.row(rows[i].first) + d, xe.row(i));
    const Mat ye = expert(w.experts[e], xe, cfg.swiglu_limit);
    for (size_t i = 0; i < rows.size(); ++i) {
      float* dst = routed.row(rows[i].first);
      for (int64_t c = 0; c < d; ++c) dst[c] += ye.at(i, c) * rows[i].second;
    }
  }
  for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = routed.v[i] + out.v[i];
  return out;
}

}  // namespace strata::cpu
