// What a config must satisfy beyond the type of each field: sizes that must be positive (checked before the
// per-layer lists are built from them), and the cross-field rules the DeepSeek-V4 model code relies on (shared-KV
// MQA, one shared expert, rope dims that fit the heads and the indexer, o_groups dividing the attention output...).
#include "model/config_sections.h"

#include <string_view>
#include <utility>

namespace strata::model::config_json {

namespace {

void require_positive(const ConfigReader& r, std::string_view field, int64_t v) {
  if (v <= 0) r.bad(std::string(field), "must be positive, found ", v);
}

}  // namespace

void check_sizes(const ConfigReader& r, const ModelConfig& c) {
  for (auto [field, v] : {std::pair{"vocab_size", c.vocab_size}, std::pair{"hidden_size", c.hidden_size},
                          std::pair{"moe_intermediate_size", c.moe_intermediate_size},
                          std::pair{"num_hidden_layers", c.num_hidden_layers},
                          std::pair{"num_attention_heads", c.num_attention_heads}, std::pair{"head_dim", c.head_dim},
                          std::pair{"q_lora_rank", c.q_lora_rank},
                          std::pair{"num_experts_per_tok", c.num_experts_per_tok},
                          std::pair{"n_routed_experts", c.n_routed_experts},
                          std::pair{"max_position_embeddings", c.max_position_embeddings},
                          std::pair{"hc_mult", c.hc_mult}, std::pair{"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
                          std::pair{"sliding_window", c.sliding_window}, std::pair{"o_groups", c.o_groups},
                          std::pair{"o_lora_rank", c.o_lora_rank}, std::pair{"index_n_heads", c.index_n_heads},
                          std::pair{"index_head_dim", c.index_head_dim}, std::pair{"index_topk", c.index_topk}})
    require_positive(r, field, v);
  // Only a guard against absurd values allocating per-layer lists; real models have tens of layers.
  constexpr int64_t kMaxLayers = 1 << 16;
  if (c.num_hidden_layers > kMaxLayers)
    r.bad("num_hidden_layers", "implausibly large (", c.num_hidden_layers, " > ", kMaxLayers, ")");
}

void check_consistency(const ConfigReader& r, const json& j, const ModelConfig& c) {
  const std::string rope_dim_field = rotary_fraction_field(j);
  if (c.num_key_value_heads != 1)
    r.bad("num_key_value_heads", "DeepSeek-V4 attention is shared-KV MQA; expected 1, found ", c.num_key_value_heads);
  if (c.n_shared_experts < 0 || c.n_shared_experts > 1)
    r.bad("n_shared_experts", "expected 0 or 1, found ", c.n_shared_experts,
          " (DeepSeek-V4 modelling builds a single shared-expert MLP; more than one is not supported)");
  if (c.num_nextn_predict_layers < 0)
    r.bad("num_nextn_predict_layers", "must be >= 0, found ", c.num_nextn_predict_layers);
  if (c.num_experts_per_tok > c.n_routed_experts)
    r.bad("num_experts_per_tok", "value ", c.num_experts_per_tok, " must be <= n_routed_experts (",
          c.n_routed_experts, ")");
  if (c.head_dim % 2 != 0) r.bad("head_dim", "must be even, found ", c.head_dim);
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim % 2 != 0 || c.qk_rope_head_dim > c.head_dim)
    r.bad(rope_dim_field, "gives qk_rope_head_dim = ", c.qk_rope_head_dim, ", which must be positive, even and <= ",
          "head_dim (", c.head_dim, ")");
  // The Lightning Indexer applies the same compress rope (qk_rope_head_dim wide) to its own heads.
  if (c.qk_rope_head_dim > c.index_head_dim)
    r.bad("index_head_dim", "value ", c.index_head_dim, " must be >= qk_rope_head_dim (", c.qk_rope_head_dim,
          "): the indexer rotates that many dims");
  if ((c.num_attention_heads * c.head_dim) % c.o_groups != 0)
    r.bad("o_groups", "value ", c.o_groups, " must divide num_attention_heads * head_dim (", c.num_attention_heads,
          " * ", c.head_dim, " = ", c.num_attention_heads * c.head_dim, ") for the grouped output projection");
  if (c.hidden_act != "silu")
    r.bad("hidden_act", "expected 'silu' (the only activation V4 uses), found '", c.hidden_act, "'");
  if (!(c.hc_eps > 0)) r.bad("hc_eps", "must be positive, found ", c.hc_eps);
  if (!(c.rms_norm_eps > 0)) r.bad("rms_norm_eps", "must be positive, found ", c.rms_norm_eps);
  if (!(c.routed_scaling_factor > 0))
    r.bad("routed_scaling_factor", "must be positive, found ", c.routed_scaling_factor);
  if (!(c.swiglu_limit >= 0)) r.bad("swiglu_limit", "must be >= 0, found ", c.swiglu_limit);
  if (!(c.rope_theta > 0)) r.bad("rope_theta", "must be positive, found ", c.rope_theta);
  if (!(c.compress_rope_theta > 0)) r.bad("compress_rope_theta", "must be positive, found ", c.compress_rope_theta);
  // An end-of-sequence id the model can never produce would let every reply run to its length limit.
  for (const int64_t eos : c.eos_token_ids)
    if (eos < 0 || eos >= c.vocab_size)
      r.bad("eos_token_id", "value ", eos, " is outside the vocabulary [0, ", c.vocab_size, ")");
}

}  // namespace strata::model::config_json
