#pragma once
// DeepSeek-V4.1's text config (`deepseek_v41` with its `text_config`, or `deepseek_v41_text` alone) and what is
// derived from it: the layer schedule (compress ratios, the layers that own compressed KV and indexer keys, the
// candidate-block layer, DSpark's target layers), the RoPE of each layer kind, the Engram settings
// (docs/deepseek_v4_1_reference.md §1). Read once; every bad value is a specific error.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/deepseek_v41/engram.h"

namespace strata::model::v41 {

// A rotary embedding: "default" (1/θ^(2i/dim)) or "yarn" (frequencies past the correction range divided by factor,
// blended between).
struct RopeSpec {
  std::string type = "default";
  double theta = 10000.0;
  double factor = 1.0, beta_fast = 32.0, beta_slow = 1.0, attention_factor = 1.0;
  int64_t original_max_position = 0;  // YaRN's original_max_position_embeddings (0: max_position_embeddings)
  bool truncate = true;
};

struct V41Config {
  int64_t vocab_size = 129280, hidden_size = 5120, num_hidden_layers = 40, num_attention_heads = 64, head_dim = 512;
  int64_t q_lora_rank = 1280, qk_rope_head_dim = 64, sliding_window = 128, max_position_embeddings = 1048576;
  int64_t o_groups = 8, o_lora_rank = 1024;
  int64_t moe_intermediate_size = 2304, n_routed_experts = 384, num_experts_per_tok = 6;
  std::string scoring_func = "sqrtsoftplus";
  double gate_temp = 1.0, routed_scaling_factor = 1.5, swiglu_limit = 10.0;
  bool norm_topk_prob = true;
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6, rms_norm_eps = 1e-20;
  int64_t index_n_heads = 32, index_head_dim = 128, index_topk = 512;
  int64_t candidate_topk_blocks = 2048, candidate_block_size = 8;
  int64_t num_nextn_predict_layers = 3;
  std::vector<int64_t> eos_token_ids = {1};
  // Derived (§1.2): ratios of the backbone layers then the DSpark layers (0: sliding window only, 2: pooled
  // "encoder", 1: full-resolution "decoder").
  std::vector<int64_t> compress_ratios, kv_source_layer_ids, index_source_layer_ids, dspark_target_layer_ids;
  int64_t candidate_source_layer_id = -1;  // -1: no two-level selection
  RopeSpec main_rope, compress_rope;       // ratio-0 layers use main_rope, every other layer compress_rope
  EngramSettings engram;
  std::vector<EngramLayerLayout> engram_layout;  // each Engram layer's primes, offsets and multipliers
  std::vector<int64_t> engram_num_embeddings;    // each Engram layer's table rows (checked against the primes)
  int64_t engram_pad_id = 2;

  // The most recent compressed-KV owner (index source) at or before `layer`; -1 if none.
  int64_t kv_source_of(int64_t layer) const;
  int64_t index_source_of(int64_t layer) const;
  int64_t ratio(int64_t layer) const { return compress_ratios.at(static_cast<size_t>(layer)); }
};

// The config.json of a V4.1 checkpoint: the composite form (model_type deepseek_v41, the text model in text_config)
// or the text config itself. Unknown keys are ignored (vision_config among them); a known one of the wrong type or
// value, or a schedule that breaks the rules of §1.2, throws naming the key.
V41Config parse_v41_config(const nlohmann::json& config);

// A rope's inverse frequencies, one per rotated pair (rotary_dim / 2), computed in fp32 in the reference's order.
std::vector<float> rope_inv_freq(const RopeSpec& rope, int64_t rotary_dim, int64_t max_position);

}  // namespace strata::model::v41
