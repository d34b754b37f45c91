#pragma once
// DeepSeek-V4.1's text forward on the CPU in fp32: the correctness reference of Strata's V4.1 kernels. One full
// sequence from an empty cache, with the cache-path semantics of docs/deepseek_v4_1_reference.md §11 (the same math
// as tests/gpu/v41_reference.py `forward` with qat=False, hf_numerics=False): Engram, single-pass mHC, SWA + shared
// compressed KV attention with sinks, the two-level indexer, the sqrtsoftplus-routed MoE, final norm and head.
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/deepseek_v41/config.h"
#include "model/deepseek_v41/weights.h"

namespace strata::model::v41 {

// fp32 logits [tokens.size(), vocab_size] of every position. Throws for an empty sequence or a token id outside
// the vocabulary.
Mat v41_logits_cpu(const V41Config& config, const V41Weights& weights, const std::vector<int32_t>& tokens);

}  // namespace strata::model::v41
