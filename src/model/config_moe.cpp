// The mixture of experts: routed and shared expert counts and sizes, top-k routing (scoring function,
// normalisation, routed scale), the SwiGLU clamp, the attribute_map aliases transformers accepts for the sizes, and
// the V3-lineage keys DeepSeek's own config.json carries. Which layers route by hash (mlp_layer_types,
// num_hash_layers) is a per-layer schedule: config_layer_types.cpp.
#include "model/config_sections.h"

#include <optional>
#include <string_view>
#include <tuple>

namespace strata::model::config_json {

namespace {

std::optional<ScoringFunc> scoring_func_from(std::string_view s) {
  if (s == "sqrtsoftplus") return ScoringFunc::SqrtSoftplus;
  if (s == "softmax") return ScoringFunc::Softmax;
  if (s == "sigmoid") return ScoringFunc::Sigmoid;
  return std::nullopt;
}

}  // namespace

void read_moe(const ConfigReader& r, const json& j, ModelConfig& c) {
  c.moe_intermediate_size = int_or(r, j, "moe_intermediate_size", c.moe_intermediate_size);
  c.num_experts_per_tok = int_or(r, j, "num_experts_per_tok", c.num_experts_per_tok);
  c.n_routed_experts = int_or(r, j, "n_routed_experts", c.n_routed_experts);
  c.n_shared_experts = int_or(r, j, "n_shared_experts", c.n_shared_experts);

  // attribute_map aliases. transformers lets the alias overwrite the field; two different values are almost
  // certainly a mistake, so that is an error here.
  for (auto [alias, target, slot] : {std::tuple{"num_local_experts", "n_routed_experts", &c.n_routed_experts},
                                     std::tuple{"intermediate_size", "moe_intermediate_size",
                                                &c.moe_intermediate_size}}) {
    const json* v = find(j, alias);
    if (!v) continue;
    const int64_t value = r.as_int(*v, alias);
    if (find(j, target) && value != *slot)
      r.bad(alias, "is an alias of '", target, "' but disagrees with it (", value, " vs ", *slot, ")");
    *slot = value;
  }

  const std::string scoring = string_or(r, j, "scoring_func", to_string(c.scoring_func));
  auto sf = scoring_func_from(scoring);
  if (!sf) r.bad("scoring_func", "expected one of sqrtsoftplus, softmax, sigmoid, found '", scoring, "'");
  c.scoring_func = *sf;
  c.norm_topk_prob = bool_or(r, j, "norm_topk_prob", c.norm_topk_prob);
  c.routed_scaling_factor = number_or(r, j, "routed_scaling_factor", c.routed_scaling_factor);
  c.swiglu_limit = number_or(r, j, "swiglu_limit", c.swiglu_limit);
  c.mlp_bias = bool_or(r, j, "mlp_bias", c.mlp_bias);

  // DeepSeek's V3-lineage keys that V4 modelling ignores; a value that would mean a different network is refused.
  if (const json* v = find(j, "first_k_dense_replace"); v && r.as_int(*v, "first_k_dense_replace") != 0)
    r.bad("first_k_dense_replace", "DeepSeek-V4 has no dense MLP layers; expected 0, found ", v->dump());
  if (const json* v = find(j, "moe_layer_freq"); v && r.as_int(*v, "moe_layer_freq") != 1)
    r.bad("moe_layer_freq", "DeepSeek-V4 has an MoE in every layer; expected 1, found ", v->dump());
}

}  // namespace strata::model::config_json

namespace strata::model {

const char* to_string(ScoringFunc f) {
  switch (f) {
    case ScoringFunc::SqrtSoftplus: return "sqrtsoftplus";
    case ScoringFunc::Softmax: return "softmax";
    case ScoringFunc::Sigmoid: return "sigmoid";
  }
  return "?";
}

}  // namespace strata::model
