#pragma once
// A random pick made where the logits are (engine::sample_token's temperature, top-k, min-p and top-p, without
// penalties or logprobs): the backend chooses the token, and only its id comes home. The draw's uniform number is
// computed by the engine (counter_uniform(seed, step)) and passed down, so a seeded request draws the same number
// whichever path samples it.
#include <cstdint>

namespace strata::model::v4 {

struct PickParams {
  double temperature = 1.0;  // > 0 (greedy rows use SequenceChunk::argmax_only)
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1]
  double uniform = 0.0;      // the draw, in [0, 1)
};

}  // namespace strata::model::v4
