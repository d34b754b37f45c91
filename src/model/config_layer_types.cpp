// Per-layer schedules, each always num_hidden_layers long after parsing: which attention a layer runs
// (layer_types, or DeepSeek's legacy compress_ratios), how many tokens a compressed entry covers for CSA and HCA
// (compress_rates, or the legacy compress_rate_csa / compress_rate_hca), and which layers route experts by token
// hash (mlp_layer_types, or the legacy num_hash_layers).
#include "model/config_sections.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

namespace strata::model::config_json {

namespace {

constexpr std::string_view kLayerTypeNames = "sliding_attention, compressed_sparse_attention, "
                                             "heavily_compressed_attention";

std::optional<AttentionType> attention_type_from(std::string_view s) {
  if (s == "sliding_attention") return AttentionType::Sliding;
  if (s == kCsaName) return AttentionType::CompressedSparse;
  if (s == kHcaName) return AttentionType::HeavilyCompressed;
  return std::nullopt;
}
std::optional<MlpType> mlp_type_from(std::string_view s) {
  if (s == "hash_moe") return MlpType::HashMoe;
  if (s == "moe") return MlpType::Moe;
  return std::nullopt;
}

// transformers keeps the first num_hidden_layers entries (DeepSeek's own files list the MTP layer too) and its
// validate_layer_type rejects a shorter list.
void check_list_length(const ConfigReader& r, const std::string& field, size_t size, int64_t n) {
  if (static_cast<int64_t>(size) < n)
    r.bad(field, "has ", size, " entries but num_hidden_layers is ", n,
          "; need one per layer (extra trailing entries are dropped)");
}

std::vector<AttentionType> parse_layer_types(const ConfigReader& r, const json& v, int64_t n) {
  const std::string field = "layer_types";
  std::vector<AttentionType> out;
  const json& arr = r.as_array(v, field);
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string s = r.as_string(arr[i], element(field, i));
    auto t = attention_type_from(s);
    if (!t) r.bad(element(field, i), "expected one of ", kLayerTypeNames, ", found '", s, "'");
    out.push_back(*t);
  }
  check_list_length(r, field, out.size(), n);
  out.resize(n);
  return out;
}

// Legacy per-layer compress ratios. __post_init__ maps them through a fixed {0, 4, 128} table (independent of
// compress_rates), so any other value is a KeyError there and an error here.
std::vector<AttentionType> parse_compress_ratios(const ConfigReader& r, const json& v) {
  const std::string field = "compress_ratios";
  std::vector<AttentionType> out;
  const json& arr = r.as_array(v, field);
  for (size_t i = 0; i < arr.size(); ++i) {
    const int64_t ratio = r.as_int(arr[i], element(field, i));
    if (ratio == 0) out.push_back(AttentionType::Sliding);
    else if (ratio == 4) out.push_back(AttentionType::CompressedSparse);
    else if (ratio == 128) out.push_back(AttentionType::HeavilyCompressed);
    else r.bad(element(field, i), "expected one of 0 (sliding), 4 (CSA), 128 (HCA), found ", ratio);
  }
  return out;  // length is checked only where it is used: transformers ignores compress_ratios next to layer_types
}

std::vector<MlpType> parse_mlp_layer_types(const ConfigReader& r, const json& v, int64_t n) {
  const std::string field = "mlp_layer_types";
  std::vector<MlpType> out;
  const json& arr = r.as_array(v, field);
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string s = r.as_string(arr[i], element(field, i));
    auto t = mlp_type_from(s);
    if (!t) r.bad(element(field, i), "expected one of hash_moe, moe, found '", s, "'");
    out.push_back(*t);
  }
  check_list_length(r, field, out.size(), n);
  out.resize(n);
  return out;
}

}  // namespace

void read_layer_schedule(const ConfigReader& r, const json& j, ModelConfig& c) {
  const int64_t n = c.num_hidden_layers;

  // compress_rates: the dict (or the defaults), then the legacy scalar overrides.
  std::optional<int64_t> csa, hca;
  if (const json* cr = find_nonnull(j, "compress_rates")) {
    r.as_object(*cr, "compress_rates");
    for (const auto& [key, value] : cr->items()) {
      if (key == kCsaName) csa = r.as_int(value, child("compress_rates", key));
      else if (key == kHcaName) hca = r.as_int(value, child("compress_rates", key));
      else r.bad(child("compress_rates", key), "unknown layer type (expected ", kCsaName, " or ", kHcaName, ")");
    }
  } else {
    csa = c.csa_compress_rate;
    hca = c.hca_compress_rate;
  }
  if (const json* v = find_nonnull(j, "compress_rate_csa")) csa = r.as_int(*v, "compress_rate_csa");
  if (const json* v = find_nonnull(j, "compress_rate_hca")) hca = r.as_int(*v, "compress_rate_hca");
  if (!csa) r.bad(child("compress_rates", kCsaName), "missing (the attention layers look it up)");
  if (!hca) r.bad(child("compress_rates", kHcaName), "missing (the attention layers look it up)");
  c.csa_compress_rate = *csa;
  c.hca_compress_rate = *hca;
  // A rate of 1 is still meaningful for CSA (its windows overlap by one block), so >= 1 is the only bound.
  if (c.csa_compress_rate < 1)
    r.bad(child("compress_rates", kCsaName), "must be >= 1, found ", c.csa_compress_rate);
  if (c.hca_compress_rate < 1)
    r.bad(child("compress_rates", kHcaName), "must be >= 1, found ", c.hca_compress_rate);

  // layer_types: explicit > legacy compress_ratios > default schedule. compress_ratios is type-checked even when
  // layer_types wins (transformers then ignores it).
  std::optional<std::vector<AttentionType>> from_ratios;
  if (const json* v = find_nonnull(j, "compress_ratios")) from_ratios = parse_compress_ratios(r, *v);
  if (const json* v = find_nonnull(j, "layer_types")) {
    c.layer_types = parse_layer_types(r, *v, n);
  } else if (from_ratios) {
    check_list_length(r, "compress_ratios", from_ratios->size(), n);
    from_ratios->resize(n);
    c.layer_types = *from_ratios;
  } else {
    c.layer_types = default_layer_types(n);
  }

  // mlp_layer_types: explicit > first num_hash_layers (legacy, default 3) hash_moe.
  const json* hash_layers = find_nonnull(j, "num_hash_layers");
  const int64_t num_hash = hash_layers ? r.as_int(*hash_layers, "num_hash_layers") : 3;
  if (num_hash < 0) r.bad("num_hash_layers", "must be >= 0, found ", num_hash);
  if (const json* v = find_nonnull(j, "mlp_layer_types")) c.mlp_layer_types = parse_mlp_layer_types(r, *v, n);
  else c.mlp_layer_types = default_mlp_layer_types(n, num_hash);
}

}  // namespace strata::model::config_json

namespace strata::model {

const char* to_string(AttentionType t) {
  switch (t) {
    case AttentionType::Sliding: return "sliding_attention";
    case AttentionType::CompressedSparse: return "compressed_sparse_attention";
    case AttentionType::HeavilyCompressed: return "heavily_compressed_attention";
  }
  return "?";
}

const char* to_string(MlpType t) {
  switch (t) {
    case MlpType::HashMoe: return "hash_moe";
    case MlpType::Moe: return "moe";
  }
  return "?";
}

std::vector<AttentionType> default_layer_types(int64_t n) {
  // ["heavily_compressed_attention"] * min(n, 2) + [CSA if i % 2 else HCA for i in range(max(n - 2, 0))]
  std::vector<AttentionType> out;
  for (int64_t i = 0; i < std::min<int64_t>(n, 2); ++i) out.push_back(AttentionType::HeavilyCompressed);
  for (int64_t i = 0; i < n - 2; ++i)
    out.push_back(i % 2 ? AttentionType::CompressedSparse : AttentionType::HeavilyCompressed);
  return out;
}

std::vector<MlpType> default_mlp_layer_types(int64_t n, int64_t num_hash_layers) {
  std::vector<MlpType> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(i < num_hash_layers ? MlpType::HashMoe : MlpType::Moe);
  return out;
}

int64_t ModelConfig::compress_rate(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layer_types.size()))
    fail("compress_rate: layer ", layer, " out of range [0, ", layer_types.size(), ")");
  switch (layer_types[layer]) {
    case AttentionType::Sliding: return 0;
    case AttentionType::CompressedSparse: return csa_compress_rate;
    case AttentionType::HeavilyCompressed: return hca_compress_rate;
  }
  return 0;
}

}  // namespace strata::model
