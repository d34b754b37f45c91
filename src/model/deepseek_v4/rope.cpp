#include "model/deepseek_v4/rope.h"

#include <algorithm>
#include <cmath>

namespace strata::model::v4 {

void RopeTable::cos_sin(int64_t pos, float* cos, float* sin) const {
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = inv_freq[i] * p;  // fp32 product, as torch's inv_freq @ position_ids
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scaling;
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scaling;
  }
}

RopeTable make_rope_table(const RopeParams& p, int64_t head_dim) {
  RopeTable t;
  const int64_t dim = static_cast<int64_t>(static_cast<double>(head_dim) * p.partial_rotary_factor);
  const int64_t half = dim / 2;
  const float base = static_cast<float>(p.rope_theta);
  // base ** (arange(0, dim, 2) / dim) in fp32.
  std::vector<float> pos_freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    pos_freqs[i] = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(dim));
  t.inv_freq.resize(static_cast<size_t>(half));
  if (p.rope_type != "yarn") {
    for (int64_t i = 0; i < half; ++i) t.inv_freq[i] = 1.0f / pos_freqs[i];
    return t;
  }
  // YaRN (transformers' _compute_yarn_parameters). V4 pins attention_factor to 1.0 unless the config sets it.
  const double factor = p.factor;
  t.attention_scaling = static_cast<float>(p.effective_attention_factor());
  const double beta_fast = p.beta_fast != 0 ? p.beta_fast : 32.0, beta_slow = p.beta_slow != 0 ? p.beta_slow : 1.0;
  const double orig = static_cast<double>(p.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(p.rope_theta));
  };
  // transformers reads `truncate` from the top level of V4's nested rope_parameters, where it never is, so the
  // correction range is always truncated for V4; we do the same.
  double low = std::floor(correction_dim(beta_fast)), high = std::ceil(correction_dim(beta_slow));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // the reference's guard against a zero-width ramp
  const float flow = static_cast<float>(low), fhigh = static_cast<float>(high);
  for (int64_t i = 0; i < half; ++i) {
    const float extrapolation = 1.0f / pos_freqs[i];
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
    const float ramp = std::clamp((static_cast<float>(i) - flow) / (fhigh - flow), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    t.inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return t;
}

}  // namespace strata::model::v4
