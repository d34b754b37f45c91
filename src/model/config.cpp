#include "model/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace strata::model {

using nlohmann::json;

namespace {

constexpr std::string_view kModelType = "deepseek_v4";

// Keys of the DeepseekV4Config dataclass (transformers 5.17) that this parser reads.
constexpr std::string_view kV4Fields[] = {
    "model_type", "vocab_size", "hidden_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "q_lora_rank", "num_experts_per_tok", "n_routed_experts", "n_shared_experts",
    "scoring_func", "norm_topk_prob", "routed_scaling_factor", "max_position_embeddings", "rope_theta",
    "layer_types", "compress_rates", "compress_rope_theta", "hc_mult", "hc_sinkhorn_iters", "hc_eps",
    "mlp_layer_types", "swiglu_limit", "sliding_window", "o_groups", "o_lora_rank", "index_n_heads",
    "index_head_dim", "index_topk", "num_nextn_predict_layers", "hidden_act", "initializer_range", "rms_norm_eps",
    "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_parameters",
    "partial_rotary_factor", "attention_bias", "mlp_bias",
    // Dataclass fields that only matter for training / HF runtime: type-checked, then ignored.
    "use_cache", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "attention_dropout",
    // Legacy spellings that __post_init__ (or PreTrainedConfig) folds into the fields above.
    "compress_ratios", "compress_rate_csa", "compress_rate_hca", "num_hash_layers", "qk_rope_head_dim",
    "rope_scaling",
    // attribute_map aliases: PreTrainedConfig.__setattr__ writes them through to the real field.
    "num_local_experts", "intermediate_size",
    // Not V4 dataclass fields but parsed here because the weight loader needs them.
    "quantization_config", "expert_dtype", "dtype", "torch_dtype",
    // DeepSeek's own config.json carries these; accepted only with the value V4 actually has (checked below).
    "first_k_dense_replace", "moe_layer_freq",
};

// Extra top-level keys that are accepted and ignored. transformers' PreTrainedConfig stores any unknown key as a
// plain attribute, so "what transformers accepts" is everything; this list is the subset real files are known to
// carry: the generic PreTrainedConfig fields, the legacy (v4.x) generic fields and generation parameters HF still
// writes into old config.json files, and DeepSeek routing/parallelism knobs that DeepseekV4 modelling ignores.
// None changes the forward pass. Any key outside this list and kV4Fields is an error, so a typo such as
// "num_hiden_layers" cannot silently fall back to a default. Extend this list (with a reason) when a real
// checkpoint needs it.
constexpr std::string_view kIgnoredExtraKeys[] = {
    // PreTrainedConfig (transformers 5.x) fields and runtime attributes.
    "transformers_version", "architectures", "output_hidden_states", "output_attentions", "return_dict",
    "use_return_dict", "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "num_labels",
    "problem_type", "auto_map", "_name_or_path", "name_or_path", "_commit_hash", "attn_implementation",
    "_attn_implementation", "_attn_implementation_internal", "experts_implementation",
    "_experts_implementation_internal", "initializer_factor",
    // Generic fields transformers 4.x wrote into every config.json.
    "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "pruned_heads", "torchscript",
    "use_bfloat16", "tf_legacy_loss", "is_decoder", "add_cross_attention", "cross_attention_hidden_size",
    "tie_encoder_decoder", "sep_token_id", "decoder_start_token_id",
    // Generation parameters: PreTrainedConfig.__post_init__ pops these (they belong to generation_config.json).
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    // DeepSeek official configs (V3 lineage): group-limited routing / aux-loss / parallelism knobs. DeepseekV4
    // modelling never reads them (routing is plain top-k over score + e_score_correction_bias).
    "n_group", "topk_group", "topk_method", "ep_size", "aux_loss_alpha", "seq_aux", "pretraining_tp",
};

constexpr std::string_view kLayerTypeNames = "sliding_attention, compressed_sparse_attention, "
                                             "heavily_compressed_attention";
constexpr std::string_view kCsaName = "compressed_sparse_attention";
constexpr std::string_view kHcaName = "heavily_compressed_attention";

// Keys a rope sub-dict may hold (transformers' yarn validator: required + optional keys, plus the BC "type").
constexpr std::string_view kRopeKeys[] = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
constexpr std::string_view kYarnKeys[] = {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
                                          "beta_slow", "mscale", "mscale_all_dim", "truncate"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view key) {
  for (std::string_view k : list)
    if (k == key) return true;
  return false;
}

std::string kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    default: return "invalid value";
  }
}

// "integer 7", "string 'foo'", "array [1,2,...": enough of the value to recognise it in a big file.
std::string describe(const json& v) {
  std::string text = v.is_string() ? "'" + v.get<std::string>() + "'" : v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return kind(v) + " " + text;
}

std::string child(const std::string& parent, std::string_view key) { return parent + "." + std::string(key); }
std::string element(const std::string& parent, size_t i) { return cat(parent, "[", i, "]"); }

// Parsing state: where errors are attributed ("config.json" or the file path).
struct Parser {
  std::string source;

  template <typename... Parts>
  [[noreturn]] void bad(const std::string& field, const Parts&... parts) const {
    fail(source, ": field '", field, "': ", parts...);
  }

  int64_t as_int(const json& v, const std::string& field) const {
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) bad(field, "integer out of range: ", u);
      return static_cast<int64_t>(u);
    }
    // Python's strict dataclass check rejects 4096.0 for an int field; so do we.
    if (!v.is_number_integer()) bad(field, "expected an integer, found ", describe(v));
    return v.get<int64_t>();
  }
  double as_number(const json& v, const std::string& field) const {
    if (!v.is_number()) bad(field, "expected a number, found ", describe(v));
    return v.get<double>();
  }
  bool as_bool(const json& v, const std::string& field) const {
    if (!v.is_boolean()) bad(field, "expected a boolean, found ", describe(v));
    return v.get<bool>();
  }
  std::string as_string(const json& v, const std::string& field) const {
    if (!v.is_string()) bad(field, "expected a string, found ", describe(v));
    return v.get<std::string>();
  }
  const json& as_array(const json& v, const std::string& field) const {
    if (!v.is_array()) bad(field, "expected an array, found ", describe(v));
    return v;
  }
  const json& as_object(const json& v, const std::string& field) const {
    if (!v.is_object()) bad(field, "expected an object, found ", describe(v));
    return v;
  }
};

// Lookup that treats a missing key and (where the dataclass field is Optional) an explicit null alike.
const json* find(const json& obj, std::string_view key) {
  auto it = obj.find(std::string(key));
  return it == obj.end() ? nullptr : &*it;
}
const json* find_nonnull(const json& obj, std::string_view key) {
  const json* v = find(obj, key);
  return v == nullptr || v->is_null() ? nullptr : v;
}

// Prefix for nested fields: top-level names appear bare, nested ones dotted ("rope_parameters.compress.factor").
std::string name(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : child(parent, key);
}

int64_t int_or(const Parser& p, const json& obj, std::string_view key, int64_t def, const std::string& parent = "") {
  const json* v = find(obj, key);
  return v ? p.as_int(*v, name(parent, key)) : def;
}
double number_or(const Parser& p, const json& obj, std::string_view key, double def, const std::string& parent = "") {
  const json* v = find(obj, key);
  return v ? p.as_number(*v, name(parent, key)) : def;
}
bool bool_or(const Parser& p, const json& obj, std::string_view key, bool def, const std::string& parent = "") {
  const json* v = find(obj, key);
  return v ? p.as_bool(*v, name(parent, key)) : def;
}
std::string string_or(const Parser& p, const json& obj, std::string_view key, std::string def,
                      const std::string& parent = "") {
  const json* v = find(obj, key);
  return v ? p.as_string(*v, name(parent, key)) : def;
}
// `int | None` fields: null and absent differ only in that absent keeps the default.
std::optional<int64_t> nullable_int_or(const Parser& p, const json& obj, std::string_view key,
                                       std::optional<int64_t> def) {
  const json* v = find(obj, key);
  if (!v) return def;
  if (v->is_null()) return std::nullopt;
  return p.as_int(*v, std::string(key));
}
std::optional<double> nullable_number(const Parser& p, const json& obj, std::string_view key,
                                      const std::string& parent) {
  const json* v = find_nonnull(obj, key);
  if (!v) return std::nullopt;
  return p.as_number(*v, name(parent, key));
}
std::optional<std::string> nullable_string(const Parser& p, const json& obj, std::string_view key,
                                           const std::string& parent = "") {
  const json* v = find_nonnull(obj, key);
  if (!v) return std::nullopt;
  return p.as_string(*v, name(parent, key));
}

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
std::optional<ScoringFunc> scoring_func_from(std::string_view s) {
  if (s == "sqrtsoftplus") return ScoringFunc::SqrtSoftplus;
  if (s == "softmax") return ScoringFunc::Softmax;
  if (s == "sigmoid") return ScoringFunc::Sigmoid;
  return std::nullopt;
}

// transformers keeps the first num_hidden_layers entries (DeepSeek's own files list the MTP layer too) and its
// validate_layer_type rejects a shorter list.
void check_list_length(const Parser& p, const std::string& field, size_t size, int64_t n) {
  if (static_cast<int64_t>(size) < n)
    p.bad(field, "has ", size, " entries but num_hidden_layers is ", n,
          "; need one per layer (extra trailing entries are dropped)");
}

std::vector<AttentionType> parse_layer_types(const Parser& p, const json& v, int64_t n) {
  const std::string field = "layer_types";
  std::vector<AttentionType> out;
  const json& arr = p.as_array(v, field);
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string s = p.as_string(arr[i], element(field, i));
    auto t = attention_type_from(s);
    if (!t) p.bad(element(field, i), "expected one of ", kLayerTypeNames, ", found '", s, "'");
    out.push_back(*t);
  }
  check_list_length(p, field, out.size(), n);
  out.resize(n);
  return out;
}

// Legacy per-layer compress ratios. __post_init__ maps them through a fixed {0, 4, 128} table (independent of
// compress_rates), so any other value is a KeyError there and an error here.
std::vector<AttentionType> parse_compress_ratios(const Parser& p, const json& v) {
  const std::string field = "compress_ratios";
  std::vector<AttentionType> out;
  const json& arr = p.as_array(v, field);
  for (size_t i = 0; i < arr.size(); ++i) {
    const int64_t r = p.as_int(arr[i], element(field, i));
    if (r == 0) out.push_back(AttentionType::Sliding);
    else if (r == 4) out.push_back(AttentionType::CompressedSparse);
    else if (r == 128) out.push_back(AttentionType::HeavilyCompressed);
    else p.bad(element(field, i), "expected one of 0 (sliding), 4 (CSA), 128 (HCA), found ", r);
  }
  return out;  // length is checked only where it is used: transformers ignores compress_ratios next to layer_types
}

std::vector<MlpType> parse_mlp_layer_types(const Parser& p, const json& v, int64_t n) {
  const std::string field = "mlp_layer_types";
  std::vector<MlpType> out;
  const json& arr = p.as_array(v, field);
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string s = p.as_string(arr[i], element(field, i));
    auto t = mlp_type_from(s);
    if (!t) p.bad(element(field, i), "expected one of hash_moe, moe, found '", s, "'");
    out.push_back(*t);
  }
  check_list_length(p, field, out.size(), n);
  out.resize(n);
  return out;
}

// One rope sub-dict. Missing rope_theta / partial_rotary_factor come from the given defaults, as
// standardize_rope_params fills them with setdefault; a YaRN dict without original_max_position_embeddings gets
// max_position_embeddings, as standardize_rope_params does.
RopeParams parse_rope(const Parser& p, const json& v, const std::string& field, double default_theta,
                      double default_partial, int64_t max_position_embeddings) {
  const json& obj = p.as_object(v, field);
  for (const auto& [key, value] : obj.items()) {
    if (!contains(kRopeKeys, key) && !contains(kYarnKeys, key))
      p.bad(child(field, key), "unknown rope parameter (expected rope_type, rope_theta, partial_rotary_factor, ",
            "or for yarn: factor, original_max_position_embeddings, attention_factor, beta_fast, beta_slow, mscale, ",
            "mscale_all_dim, truncate)");
  }
  RopeParams r;
  // "type" is the pre-rope_type spelling; rope_type wins when both are present, as in transformers.
  std::string type_field = child(field, "rope_type");
  if (const json* t = find(obj, "rope_type")) {
    r.rope_type = p.as_string(*t, type_field);
  } else if (const json* legacy = find(obj, "type")) {
    type_field = child(field, "type");
    r.rope_type = p.as_string(*legacy, type_field);
  }
  if (r.rope_type != "default" && r.rope_type != "yarn")
    p.bad(type_field, "expected 'default' or 'yarn' (the rope types DeepSeek-V4 uses), found '", r.rope_type, "'");

  r.rope_theta = number_or(p, obj, "rope_theta", default_theta, field);
  if (!(r.rope_theta > 0)) p.bad(child(field, "rope_theta"), "must be positive, found ", r.rope_theta);
  r.partial_rotary_factor = number_or(p, obj, "partial_rotary_factor", default_partial, field);
  if (!(r.partial_rotary_factor > 0 && r.partial_rotary_factor <= 1))
    p.bad(child(field, "partial_rotary_factor"), "must be in (0, 1], found ", r.partial_rotary_factor);

  if (r.rope_type == "default") {
    for (std::string_view key : kYarnKeys)
      if (find(obj, key)) p.bad(child(field, key), "only allowed when rope_type is 'yarn', rope_type is 'default'");
    return r;
  }

  r.original_max_position_embeddings =
      int_or(p, obj, "original_max_position_embeddings", max_position_embeddings, field);
  if (r.original_max_position_embeddings <= 0)
    p.bad(child(field, "original_max_position_embeddings"), "must be positive for yarn, found ",
          r.original_max_position_embeddings);
  // `factor` is a required key of transformers' yarn validator; an explicit null makes _compute_yarn_parameters
  // derive it as max_position_embeddings / original_max_position_embeddings.
  const json* factor = find(obj, "factor");
  if (!factor) p.bad(child(field, "factor"), "required when rope_type is 'yarn'");
  r.factor = factor->is_null() ? static_cast<double>(max_position_embeddings) /
                                     static_cast<double>(r.original_max_position_embeddings)
                               : p.as_number(*factor, child(field, "factor"));
  if (!(r.factor >= 1.0)) p.bad(child(field, "factor"), "must be >= 1 for yarn, found ", r.factor);

  r.attention_factor = nullable_number(p, obj, "attention_factor", field);
  if (r.attention_factor && !(*r.attention_factor > 0))
    p.bad(child(field, "attention_factor"), "must be positive, found ", *r.attention_factor);
  r.mscale = nullable_number(p, obj, "mscale", field);
  r.mscale_all_dim = nullable_number(p, obj, "mscale_all_dim", field);
  // `rope_parameters.get("beta_fast") or 32`: null and 0 both mean the default.
  const auto beta_fast = nullable_number(p, obj, "beta_fast", field);
  const auto beta_slow = nullable_number(p, obj, "beta_slow", field);
  r.beta_fast = beta_fast && *beta_fast != 0 ? *beta_fast : 32.0;
  r.beta_slow = beta_slow && *beta_slow != 0 ? *beta_slow : 1.0;
  r.truncate = bool_or(p, obj, "truncate", true, field);
  return r;
}

// rope_scaling / rope_parameters → (main, compress), mirroring convert_rope_params_to_dict, standardize_rope_params
// and the rope block at the end of DeepseekV4Config.__post_init__.
void parse_rope_parameters(const Parser& p, const json& j, ModelConfig& c) {
  // `rope_scaling or rope_parameters`: a non-empty rope_scaling wins.
  std::string field = "rope_parameters";
  const json* rp = nullptr;
  if (const json* rs = find_nonnull(j, "rope_scaling")) {
    p.as_object(*rs, "rope_scaling");
    if (!rs->empty()) rp = rs, field = "rope_scaling";
  }
  if (!rp) rp = find_nonnull(j, "rope_parameters");
  if (rp) p.as_object(*rp, field);

  if (rp && (rp->contains("main") || rp->contains("compress"))) {
    // Already nested. Sub-dicts missing rope_theta get the top-level rope_theta for BOTH main and compress (not
    // compress_rope_theta): that is what standardize_rope_params' setdefault does. Files written by transformers
    // always spell both out. No attention_factor is injected here: __post_init__ only does that on the flat path.
    for (std::string_view key : {"main", "compress"})
      if (!find(*rp, key)) p.bad(child(field, key), "missing; a nested rope_parameters needs both main and compress");
    for (const auto& [key, value] : rp->items()) {
      // Top-level leftovers that convert_rope_params_to_dict adds and __post_init__ drops.
      if (key == "main" || key == "compress") continue;
      if (!contains(kRopeKeys, key))
        p.bad(child(field, key), "unknown key next to main/compress (expected only main and compress)");
    }
    c.rope_main = parse_rope(p, (*rp)["main"], child(field, "main"), c.rope_theta, c.partial_rotary_factor,
                             c.max_position_embeddings);
    c.rope_compress = parse_rope(p, (*rp)["compress"], child(field, "compress"), c.rope_theta,
                                 c.partial_rotary_factor, c.max_position_embeddings);
    return;
  }

  // Flat (legacy rope_scaling or flat rope_parameters): it describes the compress rope; its own rope_theta and
  // partial_rotary_factor are overwritten by compress_rope_theta and the model's partial_rotary_factor. The main
  // (sliding-layer) rope is always plain RoPE at rope_theta.
  c.rope_main = RopeParams{};
  c.rope_main.rope_theta = c.rope_theta;
  c.rope_main.partial_rotary_factor = c.partial_rotary_factor;
  c.rope_compress = rp ? parse_rope(p, *rp, field, c.compress_rope_theta, c.partial_rotary_factor,
                                    c.max_position_embeddings)
                       : RopeParams{};
  c.rope_compress.rope_theta = c.compress_rope_theta;
  c.rope_compress.partial_rotary_factor = c.partial_rotary_factor;
  // The V4 reference does not scale cos/sin by YaRN's mscale; left unset, transformers would derive
  // 0.1·ln(factor)+1 (≈1.277 for factor 16), so __post_init__ pins it to 1.0.
  if (c.rope_compress.rope_type == "yarn" && !c.rope_compress.attention_factor) c.rope_compress.attention_factor = 1.0;
}

std::optional<QuantConfig> parse_quantization(const Parser& p, const json& j) {
  const json* v = find_nonnull(j, "quantization_config");
  if (!v) return std::nullopt;
  const std::string field = "quantization_config";
  const json& obj = p.as_object(*v, field);
  static constexpr std::string_view kKeys[] = {"quant_method", "fmt", "weight_block_size", "activation_scheme",
                                               "scale_fmt", "modules_to_not_convert", "dequantize"};
  for (const auto& [key, value] : obj.items())
    if (!contains(kKeys, key))
      p.bad(child(field, key), "unknown key (expected quant_method, fmt, weight_block_size, activation_scheme, ",
            "scale_fmt, modules_to_not_convert, dequantize)");

  QuantConfig q;
  const json* method = find(obj, "quant_method");
  if (!method) p.bad(child(field, "quant_method"), "missing");
  q.method = p.as_string(*method, child(field, "quant_method"));
  if (q.method != "fp8")
    p.bad(child(field, "quant_method"), "expected 'fp8' (DeepSeek block FP8), found '", q.method, "'");
  q.fmt = string_or(p, obj, "fmt", q.fmt, field);
  if (q.fmt != "e4m3") p.bad(child(field, "fmt"), "expected 'e4m3', found '", q.fmt, "'");
  // Static activation scales would need per-layer input scales that DeepSeek checkpoints do not ship.
  q.activation_scheme = string_or(p, obj, "activation_scheme", q.activation_scheme, field);
  if (q.activation_scheme != "dynamic")
    p.bad(child(field, "activation_scheme"), "expected 'dynamic', found '", q.activation_scheme, "'");
  q.scale_fmt = nullable_string(p, obj, "scale_fmt", field);
  if (q.scale_fmt && *q.scale_fmt != "ue8m0")
    p.bad(child(field, "scale_fmt"), "expected 'ue8m0' or null, found '", *q.scale_fmt, "'");
  if (const json* bs = find_nonnull(obj, "weight_block_size")) {
    const std::string bs_field = child(field, "weight_block_size");
    const json& arr = p.as_array(*bs, bs_field);
    if (arr.size() != 2) p.bad(bs_field, "expected 2 entries [rows, cols], found ", arr.size());
    q.weight_block_size.clear();
    for (size_t i = 0; i < arr.size(); ++i) {
      const int64_t b = p.as_int(arr[i], element(bs_field, i));
      if (b <= 0) p.bad(element(bs_field, i), "must be positive, found ", b);
      q.weight_block_size.push_back(b);
    }
  }
  if (const json* m = find_nonnull(obj, "modules_to_not_convert")) {
    const std::string m_field = child(field, "modules_to_not_convert");
    const json& arr = p.as_array(*m, m_field);
    for (size_t i = 0; i < arr.size(); ++i)
      q.modules_to_not_convert.push_back(p.as_string(arr[i], element(m_field, i)));
  }
  bool_or(p, obj, "dequantize", false, field);  // a transformers load-time option; type-checked only
  return q;
}

void require_positive(const Parser& p, std::string_view field, int64_t v) {
  if (v <= 0) p.bad(std::string(field), "must be positive, found ", v);
}

ModelConfig parse(const json& j, const std::string& source) {
  const Parser p{source};
  if (!j.is_object()) fail(source, ": expected a JSON object at the top level, found ", describe(j));

  const json* model_type = find(j, "model_type");
  if (!model_type) p.bad("model_type", "missing; expected '", kModelType, "'");
  const std::string mt = p.as_string(*model_type, "model_type");
  if (mt != kModelType) p.bad("model_type", "expected '", kModelType, "', found '", mt, "'");

  for (const auto& [key, value] : j.items()) {
    if (!contains(kV4Fields, key) && !contains(kIgnoredExtraKeys, key))
      p.bad(key, "unknown key for model_type deepseek_v4 (not a DeepseekV4Config field, a legacy alias, or a ",
            "known generic transformers/DeepSeek key)");
  }

  ModelConfig c;
  c.vocab_size = int_or(p, j, "vocab_size", c.vocab_size);
  c.hidden_size = int_or(p, j, "hidden_size", c.hidden_size);
  c.moe_intermediate_size = int_or(p, j, "moe_intermediate_size", c.moe_intermediate_size);
  c.num_hidden_layers = int_or(p, j, "num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = int_or(p, j, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = int_or(p, j, "num_key_value_heads", c.num_key_value_heads);
  c.head_dim = int_or(p, j, "head_dim", c.head_dim);
  c.q_lora_rank = int_or(p, j, "q_lora_rank", c.q_lora_rank);
  c.num_experts_per_tok = int_or(p, j, "num_experts_per_tok", c.num_experts_per_tok);
  c.n_routed_experts = int_or(p, j, "n_routed_experts", c.n_routed_experts);
  c.n_shared_experts = int_or(p, j, "n_shared_experts", c.n_shared_experts);
  c.max_position_embeddings = int_or(p, j, "max_position_embeddings", c.max_position_embeddings);

  // attribute_map aliases. transformers lets the alias overwrite the field; two different values are almost
  // certainly a mistake, so that is an error here.
  for (auto [alias, target, slot] : {std::tuple{"num_local_experts", "n_routed_experts", &c.n_routed_experts},
                                     std::tuple{"intermediate_size", "moe_intermediate_size",
                                                &c.moe_intermediate_size}}) {
    const json* v = find(j, alias);
    if (!v) continue;
    const int64_t value = p.as_int(*v, alias);
    if (find(j, target) && value != *slot)
      p.bad(alias, "is an alias of '", target, "' but disagrees with it (", value, " vs ", *slot, ")");
    *slot = value;
  }

  const std::string scoring = string_or(p, j, "scoring_func", to_string(c.scoring_func));
  auto sf = scoring_func_from(scoring);
  if (!sf) p.bad("scoring_func", "expected one of sqrtsoftplus, softmax, sigmoid, found '", scoring, "'");
  c.scoring_func = *sf;
  c.norm_topk_prob = bool_or(p, j, "norm_topk_prob", c.norm_topk_prob);
  c.routed_scaling_factor = number_or(p, j, "routed_scaling_factor", c.routed_scaling_factor);
  c.rope_theta = number_or(p, j, "rope_theta", c.rope_theta);
  c.compress_rope_theta = number_or(p, j, "compress_rope_theta", c.compress_rope_theta);
  c.hc_mult = int_or(p, j, "hc_mult", c.hc_mult);
  c.hc_sinkhorn_iters = int_or(p, j, "hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  c.hc_eps = number_or(p, j, "hc_eps", c.hc_eps);
  c.swiglu_limit = number_or(p, j, "swiglu_limit", c.swiglu_limit);
  c.sliding_window = int_or(p, j, "sliding_window", c.sliding_window);
  c.o_groups = int_or(p, j, "o_groups", c.o_groups);
  c.o_lora_rank = int_or(p, j, "o_lora_rank", c.o_lora_rank);
  c.index_n_heads = int_or(p, j, "index_n_heads", c.index_n_heads);
  c.index_head_dim = int_or(p, j, "index_head_dim", c.index_head_dim);
  c.index_topk = int_or(p, j, "index_topk", c.index_topk);
  c.num_nextn_predict_layers = int_or(p, j, "num_nextn_predict_layers", c.num_nextn_predict_layers);
  c.hidden_act = string_or(p, j, "hidden_act", c.hidden_act);
  c.rms_norm_eps = number_or(p, j, "rms_norm_eps", c.rms_norm_eps);
  c.initializer_range = number_or(p, j, "initializer_range", c.initializer_range);
  c.tie_word_embeddings = bool_or(p, j, "tie_word_embeddings", c.tie_word_embeddings);
  c.attention_bias = bool_or(p, j, "attention_bias", c.attention_bias);
  c.mlp_bias = bool_or(p, j, "mlp_bias", c.mlp_bias);
  c.pad_token_id = nullable_int_or(p, j, "pad_token_id", c.pad_token_id);
  c.bos_token_id = nullable_int_or(p, j, "bos_token_id", c.bos_token_id);
  if (const json* eos = find(j, "eos_token_id")) {
    c.eos_token_ids.clear();
    if (eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i)
        c.eos_token_ids.push_back(p.as_int((*eos)[i], element("eos_token_id", i)));
    } else if (!eos->is_null()) {
      if (!eos->is_number_integer())
        p.bad("eos_token_id", "expected an integer, a list of integers or null, found ", describe(*eos));
      c.eos_token_ids.push_back(p.as_int(*eos, "eos_token_id"));
    }
  }
  // Training / HF-runtime fields: checked for type so a malformed file still fails, otherwise unused.
  bool_or(p, j, "use_cache", true);
  bool_or(p, j, "output_router_logits", false);
  number_or(p, j, "router_aux_loss_coef", 0.0);
  number_or(p, j, "router_jitter_noise", 0.0);
  number_or(p, j, "attention_dropout", 0.0);

  // DeepSeek's V3-lineage keys that V4 modelling ignores; a value that would mean a different network is refused.
  if (const json* v = find(j, "first_k_dense_replace"); v && p.as_int(*v, "first_k_dense_replace") != 0)
    p.bad("first_k_dense_replace", "DeepSeek-V4 has no dense MLP layers; expected 0, found ", v->dump());
  if (const json* v = find(j, "moe_layer_freq"); v && p.as_int(*v, "moe_layer_freq") != 1)
    p.bad("moe_layer_freq", "DeepSeek-V4 has an MoE in every layer; expected 1, found ", v->dump());

  c.expert_dtype = nullable_string(p, j, "expert_dtype");
  if (c.expert_dtype && *c.expert_dtype != "fp4" && *c.expert_dtype != "fp8")
    p.bad("expert_dtype", "expected 'fp4' or 'fp8', found '", *c.expert_dtype, "'");
  // PreTrainedConfig keeps `dtype` when both are given.
  const auto dtype = nullable_string(p, j, "dtype");
  const auto torch_dtype = nullable_string(p, j, "torch_dtype");
  c.dtype = dtype ? dtype : torch_dtype;
  c.quantization = parse_quantization(p, j);

  // Sizes must be known before the per-layer lists are built.
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
    require_positive(p, field, v);
  // Only a guard against absurd values allocating per-layer lists; real models have tens of layers.
  constexpr int64_t kMaxLayers = 1 << 16;
  if (c.num_hidden_layers > kMaxLayers)
    p.bad("num_hidden_layers", "implausibly large (", c.num_hidden_layers, " > ", kMaxLayers, ")");
  const int64_t n = c.num_hidden_layers;

  // compress_rates: the dict (or the defaults), then the legacy scalar overrides.
  std::optional<int64_t> csa, hca;
  if (const json* cr = find_nonnull(j, "compress_rates")) {
    p.as_object(*cr, "compress_rates");
    for (const auto& [key, value] : cr->items()) {
      if (key == kCsaName) csa = p.as_int(value, child("compress_rates", key));
      else if (key == kHcaName) hca = p.as_int(value, child("compress_rates", key));
      else p.bad(child("compress_rates", key), "unknown layer type (expected ", kCsaName, " or ", kHcaName, ")");
    }
  } else {
    csa = c.csa_compress_rate;
    hca = c.hca_compress_rate;
  }
  if (const json* v = find_nonnull(j, "compress_rate_csa")) csa = p.as_int(*v, "compress_rate_csa");
  if (const json* v = find_nonnull(j, "compress_rate_hca")) hca = p.as_int(*v, "compress_rate_hca");
  if (!csa) p.bad(child("compress_rates", kCsaName), "missing (the attention layers look it up)");
  if (!hca) p.bad(child("compress_rates", kHcaName), "missing (the attention layers look it up)");
  c.csa_compress_rate = *csa;
  c.hca_compress_rate = *hca;
  // A rate of 1 is still meaningful for CSA (its windows overlap by one block), so >= 1 is the only bound.
  if (c.csa_compress_rate < 1)
    p.bad(child("compress_rates", kCsaName), "must be >= 1, found ", c.csa_compress_rate);
  if (c.hca_compress_rate < 1)
    p.bad(child("compress_rates", kHcaName), "must be >= 1, found ", c.hca_compress_rate);

  // layer_types: explicit > legacy compress_ratios > default schedule. compress_ratios is type-checked even when
  // layer_types wins (transformers then ignores it).
  std::optional<std::vector<AttentionType>> from_ratios;
  if (const json* v = find_nonnull(j, "compress_ratios")) from_ratios = parse_compress_ratios(p, *v);
  if (const json* v = find_nonnull(j, "layer_types")) {
    c.layer_types = parse_layer_types(p, *v, n);
  } else if (from_ratios) {
    check_list_length(p, "compress_ratios", from_ratios->size(), n);
    from_ratios->resize(n);
    c.layer_types = *from_ratios;
  } else {
    c.layer_types = default_layer_types(n);
  }

  // mlp_layer_types: explicit > first num_hash_layers (legacy, default 3) hash_moe.
  const json* hash_layers = find_nonnull(j, "num_hash_layers");
  const int64_t num_hash = hash_layers ? p.as_int(*hash_layers, "num_hash_layers") : 3;
  if (num_hash < 0) p.bad("num_hash_layers", "must be >= 0, found ", num_hash);
  if (const json* v = find_nonnull(j, "mlp_layer_types")) c.mlp_layer_types = parse_mlp_layer_types(p, *v, n);
  else c.mlp_layer_types = default_mlp_layer_types(n, num_hash);

  // partial_rotary_factor: explicit > legacy qk_rope_head_dim / head_dim > 64/512. qk_rope_head_dim is then
  // re-derived (Python int(), i.e. truncation), so an explicit partial_rotary_factor wins over a legacy
  // qk_rope_head_dim that disagrees with it.
  const json* legacy_qk = find_nonnull(j, "qk_rope_head_dim");
  const std::optional<int64_t> qk = legacy_qk ? std::optional(p.as_int(*legacy_qk, "qk_rope_head_dim")) : std::nullopt;
  if (const json* v = find_nonnull(j, "partial_rotary_factor")) {
    c.partial_rotary_factor = p.as_number(*v, "partial_rotary_factor");
  } else if (qk) {
    c.partial_rotary_factor = static_cast<double>(*qk) / static_cast<double>(c.head_dim);
  } else {
    c.partial_rotary_factor = 64.0 / 512.0;
  }
  const std::string rope_dim_field = qk && !find_nonnull(j, "partial_rotary_factor") ? "qk_rope_head_dim"
                                                                                      : "partial_rotary_factor";
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1))
    p.bad(rope_dim_field, "rotary fraction must be in (0, 1], found ", c.partial_rotary_factor, " (head_dim ",
          c.head_dim, ")");
  c.qk_rope_head_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor);

  parse_rope_parameters(p, j, c);

  // Consistency checks that the modelling code relies on.
  if (c.num_key_value_heads != 1)
    p.bad("num_key_value_heads", "DeepSeek-V4 attention is shared-KV MQA; expected 1, found ", c.num_key_value_heads);
  if (c.n_shared_experts < 0 || c.n_shared_experts > 1)
    p.bad("n_shared_experts", "expected 0 or 1, found ", c.n_shared_experts,
          " (DeepSeek-V4 modelling builds a single shared-expert MLP; more than one is not supported)");
  if (c.num_nextn_predict_layers < 0)
    p.bad("num_nextn_predict_layers", "must be >= 0, found ", c.num_nextn_predict_layers);
  if (c.num_experts_per_tok > c.n_routed_experts)
    p.bad("num_experts_per_tok", "value ", c.num_experts_per_tok, " must be <= n_routed_experts (",
          c.n_routed_experts, ")");
  if (c.head_dim % 2 != 0) p.bad("head_dim", "must be even, found ", c.head_dim);
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim % 2 != 0 || c.qk_rope_head_dim > c.head_dim)
    p.bad(rope_dim_field, "gives qk_rope_head_dim = ", c.qk_rope_head_dim, ", which must be positive, even and <= ",
          "head_dim (", c.head_dim, ")");
  // The Lightning Indexer applies the same compress rope (qk_rope_head_dim wide) to its own heads.
  if (c.qk_rope_head_dim > c.index_head_dim)
    p.bad("index_head_dim", "value ", c.index_head_dim, " must be >= qk_rope_head_dim (", c.qk_rope_head_dim,
          "): the indexer rotates that many dims");
  if ((c.num_attention_heads * c.head_dim) % c.o_groups != 0)
    p.bad("o_groups", "value ", c.o_groups, " must divide num_attention_heads * head_dim (", c.num_attention_heads,
          " * ", c.head_dim, " = ", c.num_attention_heads * c.head_dim, ") for the grouped output projection");
  if (c.hidden_act != "silu")
    p.bad("hidden_act", "expected 'silu' (the only activation V4 uses), found '", c.hidden_act, "'");
  if (!(c.hc_eps > 0)) p.bad("hc_eps", "must be positive, found ", c.hc_eps);
  if (!(c.rms_norm_eps > 0)) p.bad("rms_norm_eps", "must be positive, found ", c.rms_norm_eps);
  if (!(c.routed_scaling_factor > 0))
    p.bad("routed_scaling_factor", "must be positive, found ", c.routed_scaling_factor);
  if (!(c.swiglu_limit >= 0)) p.bad("swiglu_limit", "must be >= 0, found ", c.swiglu_limit);
  if (!(c.rope_theta > 0)) p.bad("rope_theta", "must be positive, found ", c.rope_theta);
  if (!(c.compress_rope_theta > 0)) p.bad("compress_rope_theta", "must be positive, found ", c.compress_rope_theta);
  return c;
}

json rope_to_json(const RopeParams& r) {
  json o = {{"rope_type", r.rope_type}, {"rope_theta", r.rope_theta},
            {"partial_rotary_factor", r.partial_rotary_factor}};
  if (r.rope_type != "yarn") return o;
  o["factor"] = r.factor;
  o["original_max_position_embeddings"] = r.original_max_position_embeddings;
  o["beta_fast"] = r.beta_fast;
  o["beta_slow"] = r.beta_slow;
  o["truncate"] = r.truncate;
  if (r.attention_factor) o["attention_factor"] = *r.attention_factor;
  if (r.mscale) o["mscale"] = *r.mscale;
  if (r.mscale_all_dim) o["mscale_all_dim"] = *r.mscale_all_dim;
  return o;
}

}  // namespace

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

const char* to_string(ScoringFunc f) {
  switch (f) {
    case ScoringFunc::SqrtSoftplus: return "sqrtsoftplus";
    case ScoringFunc::Softmax: return "softmax";
    case ScoringFunc::Sigmoid: return "sigmoid";
  }
  return "?";
}

double RopeParams::effective_attention_factor() const {
  if (rope_type != "yarn") return 1.0;
  if (attention_factor) return *attention_factor;
  // _compute_yarn_parameters: `if mscale and mscale_all_dim` (Python truthiness: 0 counts as unset).
  auto get_mscale = [&](double m) { return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0; };
  if (mscale.value_or(0) != 0 && mscale_all_dim.value_or(0) != 0)
    return get_mscale(*mscale) / get_mscale(*mscale_all_dim);
  return get_mscale(1.0);
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

const RopeParams& ModelConfig::rope_for_layer(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layer_types.size()))
    fail("rope_for_layer: layer ", layer, " out of range [0, ", layer_types.size(), ")");
  return layer_types[layer] == AttentionType::Sliding ? rope_main : rope_compress;
}

ModelConfig parse_config(const json& j) { return parse(j, "config.json"); }

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
  return parse(j, file);
}

json config_to_json(const ModelConfig& c) {
  auto names = [](const auto& types) {
    json arr = json::array();
    for (auto t : types) arr.push_back(to_string(t));
    return arr;
  };
  json j = {
      {"model_type", std::string(kModelType)},
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
      {"compress_rates", {{std::string(kCsaName), c.csa_compress_rate}, {std::string(kHcaName), c.hca_compress_rate}}},
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
      {"rope_parameters", {{"main", rope_to_json(c.rope_main)}, {"compress", rope_to_json(c.rope_compress)}}},
  };
  j["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  // A single id is written as an int (the usual HF spelling); parse_config reads both forms back the same.
  if (c.eos_token_ids.empty()) j["eos_token_id"] = nullptr;
  else if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else j["eos_token_id"] = c.eos_token_ids;
  if (c.quantization) {
    const QuantConfig& q = *c.quantization;
    json qj = {{"quant_method", q.method},
               {"fmt", q.fmt},
               {"weight_block_size", q.weight_block_size},
               {"activation_scheme", q.activation_scheme}};
    if (q.scale_fmt) qj["scale_fmt"] = *q.scale_fmt;
    if (!q.modules_to_not_convert.empty()) qj["modules_to_not_convert"] = q.modules_to_not_convert;
    j["quantization_config"] = qj;
  }
  if (c.expert_dtype) j["expert_dtype"] = *c.expert_dtype;
  if (c.dtype) j["dtype"] = *c.dtype;
  return j;
}

}  // namespace strata::model
