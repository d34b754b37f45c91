// How the checkpoint stores its weights: DeepSeek block FP8 (`quantization_config`), the routed experts' own
// format (`expert_dtype`: MXFP4 or FP8), and the unquantized tensors' dtype (`dtype` / legacy `torch_dtype`). The
// weight loader reads these; the forward pass never does.
#include "model/config_sections.h"

#include <string_view>

namespace strata::model::config_json {

namespace {

std::optional<QuantConfig> read_quantization_config(const ConfigReader& r, const json& j) {
  const json* v = find_nonnull(j, "quantization_config");
  if (!v) return std::nullopt;
  const std::string field = "quantization_config";
  const json& obj = r.as_object(*v, field);
  static constexpr std::string_view kKeys[] = {"quant_method", "fmt", "weight_block_size", "activation_scheme",
                                               "scale_fmt", "modules_to_not_convert", "dequantize"};
  for (const auto& [key, value] : obj.items())
    if (!contains(kKeys, key))
      r.bad(child(field, key), "unknown key (expected quant_method, fmt, weight_block_size, activation_scheme, ",
            "scale_fmt, modules_to_not_convert, dequantize)");

  QuantConfig q;
  const json* method = find(obj, "quant_method");
  if (!method) r.bad(child(field, "quant_method"), "missing");
  q.method = r.as_string(*method, child(field, "quant_method"));
  if (q.method != "fp8")
    r.bad(child(field, "quant_method"), "expected 'fp8' (DeepSeek block FP8), found '", q.method, "'");
  q.fmt = string_or(r, obj, "fmt", q.fmt, field);
  if (q.fmt != "e4m3") r.bad(child(field, "fmt"), "expected 'e4m3', found '", q.fmt, "'");
  // Static activation scales would need per-layer input scales that DeepSeek checkpoints do not ship.
  q.activation_scheme = string_or(r, obj, "activation_scheme", q.activation_scheme, field);
  if (q.activation_scheme != "dynamic")
    r.bad(child(field, "activation_scheme"), "expected 'dynamic', found '", q.activation_scheme, "'");
  q.scale_fmt = nullable_string(r, obj, "scale_fmt", field);
  if (q.scale_fmt && *q.scale_fmt != "ue8m0")
    r.bad(child(field, "scale_fmt"), "expected 'ue8m0' or null, found '", *q.scale_fmt, "'");
  if (const json* bs = find_nonnull(obj, "weight_block_size")) {
    const std::string bs_field = child(field, "weight_block_size");
    const json& arr = r.as_array(*bs, bs_field);
    if (arr.size() != 2) r.bad(bs_field, "expected 2 entries [rows, cols], found ", arr.size());
    q.weight_block_size.clear();
    for (size_t i = 0; i < arr.size(); ++i) {
      const int64_t b = r.as_int(arr[i], element(bs_field, i));
      if (b <= 0) r.bad(element(bs_field, i), "must be positive, found ", b);
      q.weight_block_size.push_back(b);
    }
  }
  if (const json* m = find_nonnull(obj, "modules_to_not_convert")) {
    const std::string m_field = child(field, "modules_to_not_convert");
    const json& arr = r.as_array(*m, m_field);
    for (size_t i = 0; i < arr.size(); ++i)
      q.modules_to_not_convert.push_back(r.as_string(arr[i], element(m_field, i)));
  }
  bool_or(r, obj, "dequantize", false, field);  // a transformers load-time option; type-checked only
  return q;
}

}  // namespace

void read_weight_formats(const ConfigReader& r, const json& j, ModelConfig& c) {
  c.expert_dtype = nullable_string(r, j, "expert_dtype");
  if (c.expert_dtype && *c.expert_dtype != "fp4" && *c.expert_dtype != "fp8")
    r.bad("expert_dtype", "expected 'fp4' or 'fp8', found '", *c.expert_dtype, "'");
  // PreTrainedConfig keeps `dtype` when both are given.
  const auto dtype = nullable_string(r, j, "dtype");
  const auto torch_dtype = nullable_string(r, j, "torch_dtype");
  c.dtype = dtype ? dtype : torch_dtype;
  c.quantization = read_quantization_config(r, j);
}

json quantization_to_json(const QuantConfig& q) {
  json qj = {{"quant_method", q.method},
             {"fmt", q.fmt},
             {"weight_block_size", q.weight_block_size},
             {"activation_scheme", q.activation_scheme}};
  if (q.scale_fmt) qj["scale_fmt"] = *q.scale_fmt;
  if (!q.modules_to_not_convert.empty()) qj["modules_to_not_convert"] = q.modules_to_not_convert;
  return qj;
}

}  // namespace strata::model::config_json
