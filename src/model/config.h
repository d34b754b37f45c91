#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_variant.h"

// DeepSeek-V4 `config.json`, parsed and validated the way transformers 5.17 `DeepseekV4Config.__post_init__` reads
// it (legacy keys folded in, defaults filled, lists truncated), but strict where transformers only warns: every
// wrong type, unknown key or inconsistent size is a strata::Error naming the field, so a bad file fails at load time
// rather than as a shape mismatch deep inside the model.
//
// The parser is split by topic (RoPE/YaRN in config_rope.cpp, layer schedules in config_layer_types.cpp, ...);
// model/config_sections.h lists the parts in the order config.cpp runs them.
namespace strata::model {

enum class AttentionType { Sliding, CompressedSparse, HeavilyCompressed };
enum class MlpType { HashMoe, Moe };
enum class ScoringFunc { SqrtSoftplus, Softmax, Sigmoid };

// The JSON spellings: "sliding_attention", "hash_moe", "sqrtsoftplus", ...
const char* to_string(AttentionType t);
const char* to_string(MlpType t);
const char* to_string(ScoringFunc f);

// One of rope_parameters["main"] (sliding layers) / ["compress"] (CSA/HCA layers and their compressors/indexer).
struct RopeParams {
  std::string rope_type = "default";  // "default" or "yarn"
  double rope_theta = 10000.0;
  double partial_rotary_factor = 0.125;
  // YaRN; left at these values when rope_type == "default".
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0, beta_slow = 1.0;
  std::optional<double> attention_factor = std::nullopt, mscale = std::nullopt, mscale_all_dim = std::nullopt;
  // What the file says. transformers' `_compute_yarn_parameters` reads `truncate` from the top level of the nested
  // rope_parameters dict ({"main", "compress"}), never from this sub-dict, so for V4 it is effectively always true.
  // The model code decides which behaviour to follow.
  bool truncate = true;

  // The cos/sin multiplier transformers uses: `attention_factor` if set, else YaRN's mscale rule
  // (0.1·mscale·ln(factor)+1, as a ratio when both mscale and mscale_all_dim are non-zero); 1.0 for default rope.
  double effective_attention_factor() const;

  bool operator==(const RopeParams&) const = default;
};

// DeepSeek block-FP8 checkpoint quantization (`quantization_config` with quant_method "fp8").
struct QuantConfig {
  std::string method = "fp8";
  std::vector<int64_t> weight_block_size = {128, 128};  // [rows, cols] of one scale block
  std::string fmt = "e4m3";
  std::string activation_scheme = "dynamic";
  std::optional<std::string> scale_fmt;  // "ue8m0" (power-of-two scales) or absent (float scales)
  std::vector<std::string> modules_to_not_convert;

  bool operator==(const QuantConfig&) const = default;
};

// transformers' default schedules, also used for the member defaults below.
std::vector<AttentionType> default_layer_types(int64_t num_hidden_layers);  // 2× HCA, then HCA/CSA interleave
std::vector<MlpType> default_mlp_layer_types(int64_t num_hidden_layers, int64_t num_hash_layers = 3);

struct ModelConfig {
  // Which model the file describes (model/model_variant.h): config.json's model_type, as the file spells it, and
  // the variant it names. Only DeepSeek-V4 is parsed today; other model types are refused by name.
  ModelVariant variant = ModelVariant::DeepSeekV4;
  std::string model_type = "deepseek_v4";

  int64_t vocab_size = 129280, hidden_size = 4096, moe_intermediate_size = 2048, num_hidden_layers = 43,
          num_attention_heads = 64, num_key_value_heads = 1, head_dim = 512, q_lora_rank = 1024,
          num_experts_per_tok = 6, n_routed_experts = 256, n_shared_experts = 1, max_position_embeddings = 1048576;
  ScoringFunc scoring_func = ScoringFunc::SqrtSoftplus;
  bool norm_topk_prob = true;
  // rope_theta / compress_rope_theta are the raw top-level fields; a nested rope_parameters may override them, so
  // model code should read rope_main / rope_compress (or rope_for_layer).
  double routed_scaling_factor = 1.5, rope_theta = 10000.0, compress_rope_theta = 160000.0;
  std::vector<AttentionType> layer_types = default_layer_types(43);  // always num_hidden_layers long after parsing
  std::vector<MlpType> mlp_layer_types = default_mlp_layer_types(43);  // always num_hidden_layers long after parsing
  int64_t csa_compress_rate = 4, hca_compress_rate = 128;  // the compress_rates dict
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double swiglu_limit = 10.0;
  int64_t sliding_window = 128, o_groups = 8, o_lora_rank = 1024, index_n_heads = 64, index_head_dim = 128,
          index_topk = 512, num_nextn_predict_layers = 1;
  std::string hidden_act = "silu";
  double rms_norm_eps = 1e-6, initializer_range = 0.02;
  std::optional<int64_t> pad_token_id, bos_token_id = 0;
  std::vector<int64_t> eos_token_ids = {1};  // empty when the file says null
  bool tie_word_embeddings = false, attention_bias = false, mlp_bias = false;
  double partial_rotary_factor = 0.125;
  int64_t qk_rope_head_dim = 64;  // int(head_dim * partial_rotary_factor), derived
  RopeParams rope_main;
  RopeParams rope_compress = RopeParams{.rope_theta = 160000.0};
  std::optional<QuantConfig> quantization;  // quantization_config
  std::optional<std::string> expert_dtype;  // DeepSeek's "fp4" (MXFP4 routed experts) or "fp8"; absent = like the rest
  std::optional<std::string> dtype;         // "dtype" (or legacy "torch_dtype"), e.g. "bfloat16"

  int64_t compress_rate(int64_t layer) const;             // 0 for sliding, csa/hca rate otherwise
  const RopeParams& rope_for_layer(int64_t layer) const;  // sliding → main, CSA/HCA → compress

  bool operator==(const ModelConfig&) const = default;
};

ModelConfig parse_config(const nlohmann::json& j);  // throws strata::Error naming the field on bad input
// A config.json file or a directory holding one. Unlike parse_config, the weight sizes (vocab_size, hidden_size,
// num_hidden_layers, ...) must be given: a checkpoint's file that leaves one out is an error naming it.
ModelConfig load_config(const std::string& path);
// Canonical config.json: the config's model_type, nested rope_parameters, explicit layer_types / mlp_layer_types /
// compress_rates. parse_config(config_to_json(c)) == c for any parsed c.
nlohmann::json config_to_json(const ModelConfig& c);

}  // namespace strata::model
