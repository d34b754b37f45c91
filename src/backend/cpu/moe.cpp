// CpuBackend's MoE: the router (score function, hash or biased top-k) and the SwiGLU experts.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"

namespace strata::cpu {

using model::ModelConfig;
using model::ScoringFunc;
using namespace model::v4;

Mat CpuBackend::expert(const ExpertWeights& w, const Mat& x, double limit_d) const {
  Mat g = cpu::linear(x, w.w1);
  const Mat u = cpu::linear(x, w.w3);
  const float limit = static_cast<float>(limit_d);
  for (size_t i = 0; i < g.v.size(); ++i) g.v[i] = silu(std::min(g.v[i], limit)) * std::clamp(u.v[i], -limit, limit);
  return cpu::linear(g, w.w2);
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

Mat CpuBackend::experts(const Mat& x, const Routing& routing, const MoeWeights& w, const ModelConfig& cfg) const {
  const int64_t n = x.rows, d = x.cols;
  Mat out = w.shared ? expert(*w.shared, x, cfg.swiglu_limit) : Mat(n, d);
  Mat routed(n, d);
  routed_experts_.push_back(
      std::count_if(routing.begin(), routing.end(), [](const auto& rows) { return !rows.empty(); }));
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
