#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace strata::model::v4 {

// Rotary frequencies for one rope type ("main" θ=10000 on sliding layers, "compress" θ=160000 + YaRN on CSA/HCA
// layers). V4's RoPE is interleaved and partial: it rotates the trailing `rope_dim` channels of a head in pairs
// (2i, 2i+1) by angle pos·inv_freq[i].
struct RopeTable {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  float attention_scaling = 1.0f;

  int64_t half() const { return static_cast<int64_t>(inv_freq.size()); }
  // cos/sin[half] for an absolute position, computed in fp32 the way transformers does.
  void cos_sin(int64_t pos, float* cos, float* sin) const;
};

RopeTable make_rope_table(const RopeParams& p, int64_t head_dim);

}  // namespace strata::model::v4
