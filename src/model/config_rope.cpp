// Rotary position embeddings: where RoPE and YaRN are parsed. DeepSeek-V4 has two ropes (DESIGN.md): "main" for
// sliding-window layers (plain RoPE, theta 10000) and "compress" for CSA/HCA layers, their compressors and the
// indexer (YaRN, theta 160000). Both rotate the trailing qk_rope_head_dim = head_dim * partial_rotary_factor dims.
//
// The file may spell this three ways, read as transformers 5.17 does: a nested rope_parameters {"main",
// "compress"}; a flat rope_parameters or legacy rope_scaling describing the compress rope (DeepSeek's own
// config.json); or nothing (defaults). The rotary fraction comes from partial_rotary_factor or, in DeepSeek's
// spelling, qk_rope_head_dim.
#include "model/config_sections.h"

#include <cmath>
#include <optional>
#include <string_view>

namespace strata::model::config_json {

namespace {

// Keys a rope sub-dict may hold (transformers' yarn validator: required + optional keys, plus the BC "type").
constexpr std::string_view kRopeKeys[] = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
constexpr std::string_view kYarnKeys[] = {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
                                          "beta_slow", "mscale", "mscale_all_dim", "truncate"};

// One rope sub-dict. Missing rope_theta / partial_rotary_factor come from the given defaults, as
// standardize_rope_params fills them with setdefault; a YaRN dict without original_max_position_embeddings gets
// max_position_embeddings, as standardize_rope_params does.
RopeParams parse_rope(const ConfigReader& r, const json& v, const std::string& field, double default_theta,
                      double default_partial, int64_t max_position_embeddings) {
  const json& obj = r.as_object(v, field);
  for (const auto& [key, value] : obj.items()) {
    if (!contains(kRopeKeys, key) && !contains(kYarnKeys, key))
      r.bad(child(field, key), "unknown rope parameter (expected rope_type, rope_theta, partial_rotary_factor, ",
            "or for yarn: factor, original_max_position_embeddings, attention_factor, beta_fast, beta_slow, mscale, ",
            "mscale_all_dim, truncate)");
  }
  RopeParams rope;
  // "type" is the pre-rope_type spelling; rope_type wins when both are present, as in transformers.
  std::string type_field = child(field, "rope_type");
  if (const json* t = find(obj, "rope_type")) {
    rope.rope_type = r.as_string(*t, type_field);
  } else if (const json* legacy = find(obj, "type")) {
    type_field = child(field, "type");
    rope.rope_type = r.as_string(*legacy, type_field);
  }
  if (rope.rope_type != "default" && rope.rope_type != "yarn")
    r.bad(type_field, "expected 'default' or 'yarn' (the rope types DeepSeek-V4 uses), found '", rope.rope_type, "'");

  rope.rope_theta = number_or(r, obj, "rope_theta", default_theta, field);
  if (!(rope.rope_theta > 0)) r.bad(child(field, "rope_theta"), "must be positive, found ", rope.rope_theta);
  rope.partial_rotary_factor = number_or(r, obj, "partial_rotary_factor", default_partial, field);
  if (!(rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1))
    r.bad(child(field, "partial_rotary_factor"), "must be in (0, 1], found ", rope.partial_rotary_factor);

  if (rope.rope_type == "default") {
    for (std::string_view key : kYarnKeys)
      if (find(obj, key)) r.bad(child(field, key), "only allowed when rope_type is 'yarn', rope_type is 'default'");
    return rope;
  }

  rope.original_max_position_embeddings =
      int_or(r, obj, "original_max_position_embeddings", max_position_embeddings, field);
  if (rope.original_max_position_embeddings <= 0)
    r.bad(child(field, "original_max_position_embeddings"), "must be positive for yarn, found ",
          rope.original_max_position_embeddings);
  // `factor` is a required key of transformers' yarn validator; an explicit null makes _compute_yarn_parameters
  // derive it as max_position_embeddings / original_max_position_embeddings.
  const json* factor = find(obj, "factor");
  if (!factor) r.bad(child(field, "factor"), "required when rope_type is 'yarn'");
  rope.factor = factor->is_null() ? static_cast<double>(max_position_embeddings) /
                                        static_cast<double>(rope.original_max_position_embeddings)
                                  : r.as_number(*factor, child(field, "factor"));
  if (!(rope.factor >= 1.0)) r.bad(child(field, "factor"), "must be >= 1 for yarn, found ", rope.factor);

  rope.attention_factor = nullable_number(r, obj, "attention_factor", field);
  if (rope.attention_factor && !(*rope.attention_factor > 0))
    r.bad(child(field, "attention_factor"), "must be positive, found ", *rope.attention_factor);
  rope.mscale = nullable_number(r, obj, "mscale", field);
  rope.mscale_all_dim = nullable_number(r, obj, "mscale_all_dim", field);
  // `rope_parameters.get("beta_fast") or 32`: null and 0 both mean the default.
  const auto beta_fast = nullable_number(r, obj, "beta_fast", field);
  const auto beta_slow = nullable_number(r, obj, "beta_slow", field);
  rope.beta_fast = beta_fast && *beta_fast != 0 ? *beta_fast : 32.0;
  rope.beta_slow = beta_slow && *beta_slow != 0 ? *beta_slow : 1.0;
  rope.truncate = bool_or(r, obj, "truncate", true, field);
  return rope;
}

// rope_scaling / rope_parameters → (main, compress), mirroring convert_rope_params_to_dict, standardize_rope_params
// and the rope block at the end of DeepseekV4Config.__post_init__.
void parse_rope_parameters(const ConfigReader& r, const json& j, ModelConfig& c) {
  // `rope_scaling or rope_parameters`: a non-empty rope_scaling wins.
  std::string field = "rope_parameters";
  const json* rp = nullptr;
  if (const json* rs = find_nonnull(j, "rope_scaling")) {
    r.as_object(*rs, "rope_scaling");
    if (!rs->empty()) rp = rs, field = "rope_scaling";
  }
  if (!rp) rp = find_nonnull(j, "rope_parameters");
  if (rp) r.as_object(*rp, field);

  if (rp && (rp->contains("main") || rp->contains("compress"))) {
    // Already nested. Sub-dicts missing rope_theta get the top-level rope_theta for BOTH main and compress (not
    // compress_rope_theta): that is what standardize_rope_params' setdefault does. Files written by transformers
    // always spell both out. No attention_factor is injected here: __post_init__ only does that on the flat path.
    for (std::string_view key : {"main", "compress"})
      if (!find(*rp, key)) r.bad(child(field, key), "missing; a nested rope_parameters needs both main and compress");
    for (const auto& [key, value] : rp->items()) {
      // Top-level leftovers that convert_rope_params_to_dict adds and __post_init__ drops.
      if (key == "main" || key == "compress") continue;
      if (!contains(kRopeKeys, key))
        r.bad(child(field, key), "unknown key next to main/compress (expected only main and compress)");
    }
    c.rope_main = parse_rope(r, (*rp)["main"], child(field, "main"), c.rope_theta, c.partial_rotary_factor,
                             c.max_position_embeddings);
    c.rope_compress = parse_rope(r, (*rp)["compress"], child(field, "compress"), c.rope_theta,
                                 c.partial_rotary_factor, c.max_position_embeddings);
    return;
  }

  // Flat (legacy rope_scaling or flat rope_parameters): it describes the compress rope; its own rope_theta and
  // partial_rotary_factor are overwritten by compress_rope_theta and the model's partial_rotary_factor. The main
  // (sliding-layer) rope is always plain RoPE at rope_theta.
  c.rope_main = RopeParams{};
  c.rope_main.rope_theta = c.rope_theta;
  c.rope_main.partial_rotary_factor = c.partial_rotary_factor;
  c.rope_compress = rp ? parse_rope(r, *rp, field, c.compress_rope_theta, c.partial_rotary_factor,
                                    c.max_position_embeddings)
                       : RopeParams{};
  c.rope_compress.rope_theta = c.compress_rope_theta;
  c.rope_compress.partial_rotary_factor = c.partial_rotary_factor;
  // The V4 reference does not scale cos/sin by YaRN's mscale; left unset, transformers would derive
  // 0.1·ln(factor)+1 (≈1.277 for factor 16), so __post_init__ pins it to 1.0.
  if (c.rope_compress.rope_type == "yarn" && !c.rope_compress.attention_factor) c.rope_compress.attention_factor = 1.0;
}

// partial_rotary_factor: explicit > legacy qk_rope_head_dim / head_dim > 64/512.
void read_rotary_fraction(const ConfigReader& r, const json& j, ModelConfig& c) {
  // qk_rope_head_dim is re-derived (Python int(), i.e. truncation), so an explicit partial_rotary_factor wins over
  // a legacy qk_rope_head_dim that disagrees with it.
  const json* legacy_qk = find_nonnull(j, "qk_rope_head_dim");
  const std::optional<int64_t> qk = legacy_qk ? std::optional(r.as_int(*legacy_qk, "qk_rope_head_dim")) : std::nullopt;
  if (const json* v = find_nonnull(j, "partial_rotary_factor")) {
    c.partial_rotary_factor = r.as_number(*v, "partial_rotary_factor");
  } else if (qk) {
    c.partial_rotary_factor = static_cast<double>(*qk) / static_cast<double>(c.head_dim);
  } else {
    c.partial_rotary_factor = 64.0 / 512.0;
  }
  const std::string rope_dim_field = rotary_fraction_field(j);
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1))
    r.bad(rope_dim_field, "rotary fraction must be in (0, 1], found ", c.partial_rotary_factor, " (head_dim ",
          c.head_dim, ")");
  c.qk_rope_head_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);
}

}  // namespace

void read_rope(const ConfigReader& r, const json& j, ModelConfig& c) {
  c.rope_theta = number_or(r, j, "rope_theta", c.rope_theta);
  c.compress_rope_theta = number_or(r, j, "compress_rope_theta", c.compress_rope_theta);
  read_rotary_fraction(r, j, c);
  parse_rope_parameters(r, j, c);
}

std::string rotary_fraction_field(const json& j) {
  return find_nonnull(j, "qk_rope_head_dim") && !find_nonnull(j, "partial_rotary_factor") ? "qk_rope_head_dim"
                                                                                           : "partial_rotary_factor";
}

json rope_to_json(const RopeParams& rope) {
  json o = {{"rope_type", rope.rope_type}, {"rope_theta", rope.rope_theta},
            {"partial_rotary_factor", rope.partial_rotary_factor}};
  if (rope.rope_type != "yarn") return o;
  o["factor"] = rope.factor;
  o["original_max_position_embeddings"] = rope.original_max_position_embeddings;
  o["beta_fast"] = rope.beta_fast;
  o["beta_slow"] = rope.beta_slow;
  o["truncate"] = rope.truncate;
  if (rope.attention_factor) o["attention_factor"] = *rope.attention_factor;
  if (rope.mscale) o["mscale"] = *rope.mscale;
  if (rope.mscale_all_dim) o["mscale_all_dim"] = *rope.mscale_all_dim;
  return o;
}

}  // namespace strata::model::config_json

namespace strata::model {

double RopeParams::effective_attention_factor() const {
  if (rope_type != "yarn") return 1.0;
  if (attention_factor) return *attention_factor;
  // _compute_yarn_parameters: `if mscale and mscale_all_dim` (Python truthiness: 0 counts as unset).
  auto get_mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
  if (mscale.value_or(0) != 0 && mscale_all_dim.value_or(0) != 0)
    return get_mscale(*mscale) / get_mscale(*mscale_all_dim);
  return get_mscale(1.0);
}

const RopeParams& ModelConfig::rope_for_layer(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layer_types.size()))
    fail("rope_for_layer: layer ", layer, " out of range [0, ", layer_types.size(), ")");
  return layer_types[layer] == AttentionType::Sliding ? rope_main : rope_compress;
}

}  // namespace strata::model
