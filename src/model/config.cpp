// config.json → ModelConfig: the order of the parts, loading a file, and writing the canonical config.json back.
// Each part of the parse lives in its own file; config_sections.h lists them.
#include "model/config.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/error.h"
#include "model/config_sections.h"

namespace strata::model {

using nlohmann::json;

namespace {

// DeepSeek's inference/config.json (the ModelArgs of its reference inference code) has no model_type and other
// key names ("dim", "n_layers", ...); say so rather than only "missing".
std::string missing_model_type_hint(const json& j) {
  for (const char* key : {"dim", "n_layers", "n_heads"})
    if (j.contains(key))
      return cat("; this looks like DeepSeek's inference/config.json (it has '", key,
                 "'): Strata reads the Hugging Face config.json that ships next to the weights");
  return "";
}

// model_type decides which model the rest of the file describes, so it is read before anything else.
void read_model_type(const config_json::ConfigReader& r, const json& j, ModelConfig& c) {
  const json* model_type = config_json::find(j, "model_type");
  if (!model_type)
    r.bad("model_type", "missing; expected '", model_type_of(ModelVariant::DeepSeekV4), "'", missing_model_type_hint(j));
  c.model_type = r.as_string(*model_type, "model_type");
  const std::optional<ModelVariant> variant = model_variant_for(c.model_type);
  if (!variant) r.bad("model_type", unsupported_model_type_reason(c.model_type));
  c.variant = *variant;
}

// The sizes a checkpoint's tensors have. transformers fills them from V4-Flash's shape when absent, but a checkpoint
// whose file leaves one out would then fail far from the cause (a tensor shape mismatch), or not at all.
void require_weight_sizes(const config_json::ConfigReader& r, const json& j) {
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                          "q_lora_rank", "o_lora_rank", "moe_intermediate_size", "n_routed_experts"})
    if (!config_json::find_nonnull(j, key))
      r.bad(key, "missing; a checkpoint's config.json must give it (it sizes the weights)");
}

// `from_file`: a checkpoint's config.json, which must give the weight sizes (require_weight_sizes).
ModelConfig parse(const json& j, const std::string& source, bool from_file) {
  using namespace config_json;
  const ConfigReader r{source};
  if (!j.is_object()) fail(source, ": expected a JSON object at the top level, found ", describe(j));

  ModelConfig c;
  read_model_type(r, j, c);
  check_known_keys(r, j);
  if (from_file) require_weight_sizes(r, j);
  read_dimensions(r, j, c);
  read_moe(r, j, c);
  read_weight_formats(r, j, c);
  check_sizes(r, c);  // before the per-layer lists are built from them
  read_layer_schedule(r, j, c);
  read_rope(r, j, c);
  check_consistency(r, j, c);
  return c;
}

}  // namespace

ModelConfig parse_config(const json& j) { return parse(j, "config.json", false); }

ModelConfig load_config(const std::string& path) {
  std::string file = path;
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    file = (std::filesystem::path(path) / "config.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, ": cannot open config file: ", std::strerror(errno));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    fail(file, ": invalid JSON: ", e.what());
  }
  return parse(j, file, true);
}

json config_to_json(const ModelConfig& c) {
  auto names = [](const auto& types) {
    json arr = json::array();
    for (auto t : types) arr.push_back(to_string(t));
    return arr;
  };
  json j = {
      {"model_type", c.model_type},
      {"architectures", json::array({"DeepseekV4ForCausalLM"})},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"q_lora_rank", c.q_lora_rank},
      {"num_experts_per_tok", c.num_experts_per_tok},
      {"n_routed_experts", c.n_routed_experts},
      {"n_shared_experts", c.n_shared_experts},
      {"max_position_embeddings", c.max_position_embeddings},
      {"scoring_func", to_string(c.scoring_func)},
      {"norm_topk_prob", c.norm_topk_prob},
      {"routed_scaling_factor", c.routed_scaling_factor},
      {"rope_theta", c.rope_theta},
      {"compress_rope_theta", c.compress_rope_theta},
      {"layer_types", names(c.layer_types)},
      {"mlp_layer_types", names(c.mlp_layer_types)},
      {"compress_rates", {{std::string(config_json::kCsaName), c.csa_compress_rate},
                          {std::string(config_json::kHcaName), c.hca_compress_rate}}},
      {"hc_mult", c.hc_mult},
      {"hc_sinkhorn_iters", c.hc_sinkhorn_iters},
      {"hc_eps", c.hc_eps},
      {"swiglu_limit", c.swiglu_limit},
      {"sliding_window", c.sliding_window},
      {"o_groups", c.o_groups},
      {"o_lora_rank", c.o_lora_rank},
      {"index_n_heads", c.index_n_heads},
      {"index_head_dim", c.index_head_dim},
      {"index_topk", c.index_topk},
      {"num_nextn_predict_layers", c.num_nextn_predict_layers},
      {"hidden_act", c.hidden_act},
      {"rms_norm_eps", c.rms_norm_eps},
      {"initializer_range", c.initializer_range},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"mlp_bias", c.mlp_bias},
      {"partial_rotary_factor", c.partial_rotary_factor},
      {"rope_parameters",
       {{"main", config_json::rope_to_json(c.rope_main)}, {"compress", config_json::rope_to_json(c.rope_compress)}}},
  };
  j["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  // A single id is written as an int (the usual HF spelling); parse_config reads both forms back the same.
  if (c.eos_token_ids.empty()) j["eos_token_id"] = nullptr;
  else if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else j["eos_token_id"] = c.eos_token_ids;
  if (c.quantization) j["quantization_config"] = config_json::quantization_to_json(*c.quantization);
  if (c.expert_dtype) j["expert_dtype"] = *c.expert_dtype;
  if (c.dtype) j["dtype"] = *c.dtype;
  return j;
}

}  // namespace strata::model
