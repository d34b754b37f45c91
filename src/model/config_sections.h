#pragma once
// The parts of parse_config (model/config.h), in the order config.cpp runs them, and the file each lives in.
// Internal to src/model/config*.cpp; everyone else includes model/config.h.
//
//   config_keys.cpp          which top-level keys a config.json may hold (transformers' fields, DeepSeek's own
//                            spellings, legacy aliases, ignored generic keys)
//   config_dimensions.cpp    the network's sizes and scalar settings (attention, indexer, mHC, norms, token ids)
//   config_moe.cpp           the mixture of experts: expert counts and sizes, routing, aliases, V3-lineage keys
//   config_quantization.cpp  how the checkpoint stores weights: quantization_config, expert_dtype, dtype
//   config_checks.cpp        sizes that must be positive, and the cross-field checks the model code relies on
//   config_layer_types.cpp   per-layer schedules: layer_types / compress_ratios, compress_rates, mlp_layer_types
//   config_rope.cpp          RoPE and YaRN: rope_theta, partial_rotary_factor, rope_parameters / rope_scaling
//
// Each reads what it needs from the JSON object `j` with its type checked (config_reader.h) and fills its part of
// the ModelConfig; a bad value is a strata::Error naming the field.
#include <string>
#include <string_view>

#include "model/config.h"
#include "model/config_reader.h"

namespace strata::model::config_json {

// config_keys.cpp: any key outside the known lists is an error, so a typo cannot fall back to a default.
void check_known_keys(const ConfigReader& r, const json& j);

// config_dimensions.cpp
void read_dimensions(const ConfigReader& r, const json& j, ModelConfig& c);

// config_moe.cpp
void read_moe(const ConfigReader& r, const json& j, ModelConfig& c);

// config_quantization.cpp
void read_weight_formats(const ConfigReader& r, const json& j, ModelConfig& c);
json quantization_to_json(const QuantConfig& q);

// config_checks.cpp. Sizes are checked before anything allocates per-layer lists from them; the consistency
// checks run last, on the whole config.
void check_sizes(const ConfigReader& r, const ModelConfig& c);
void check_consistency(const ConfigReader& r, const json& j, const ModelConfig& c);

// config_layer_types.cpp (needs num_hidden_layers checked)
void read_layer_schedule(const ConfigReader& r, const json& j, ModelConfig& c);
// The compress_rates keys (and layer_types spellings) of the two compressed attention types.
inline constexpr std::string_view kCsaName = "compressed_sparse_attention";
inline constexpr std::string_view kHcaName = "heavily_compressed_attention";

// config_rope.cpp (needs head_dim and max_position_embeddings checked)
void read_rope(const ConfigReader& r, const json& j, ModelConfig& c);
// The key the rotary fraction came from, for errors about it: "qk_rope_head_dim" when only that legacy key
// gives it, else "partial_rotary_factor".
std::string rotary_fraction_field(const json& j);
json rope_to_json(const RopeParams& rope);

}  // namespace strata::model::config_json
