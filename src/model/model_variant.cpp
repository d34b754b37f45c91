#include "model/model_variant.h"

#include <array>

namespace strata::model {

namespace {

// A model_type this code knows: the variant Strata runs for it, or, for a family it does not run yet, why not.
struct KnownModelType {
  std::string_view model_type;
  std::string_view family;
  std::optional<ModelVariant> variant;
  std::string_view not_supported_because;  // when variant is nullopt
};

// DeepSeek-V4.1 differs from V4 in the network itself (Engram tables, CSA2 attention over compressed KV shared
// between layers, DSpark drafting layers, a composite text + vision config),
// so it needs its own model implementation, not a config switch. transformers spells it "deepseek_v41";
// "deepseek_v4_1" is accepted as a name for it too.
constexpr std::string_view kV41Reason =
    "its Engram layers, CSA2 attention with shared compressed KV, DSpark draft layers and text + vision config "
    "need a model implementation Strata does not have";

constexpr std::array<KnownModelType, 3> kKnownModelTypes = {{
    {"deepseek_v4", "DeepSeek-V4", ModelVariant::DeepSeekV4, ""},
    {"deepseek_v41", "DeepSeek-V4.1 (DeepSeek-V4.1-Flash)", std::nullopt, kV41Reason},
    {"deepseek_v4_1", "DeepSeek-V4.1 (DeepSeek-V4.1-Flash)", std::nullopt, kV41Reason},
}};

const KnownModelType* find_known(std::string_view model_type) {
  for (const KnownModelType& known : kKnownModelTypes)
    if (known.model_type == model_type) return &known;
  return nullptr;
}

// "'deepseek_v4' (DeepSeek-V4)", comma-separated when there are several.
std::string supported_list() {
  std::string out;
  for (const KnownModelType& known : kKnownModelTypes) {
    if (!known.variant) continue;
    if (!out.empty()) out += ", ";
    out += cat("'", known.model_type, "' (", known.family, ")");
  }
  return out;
}

}  // namespace

std::string_view model_type_of(ModelVariant variant) {
  switch (variant) {
    case ModelVariant::DeepSeekV4: return "deepseek_v4";
  }
  fail("model_type_of: unknown ModelVariant ", static_cast<int>(variant));
}

std::string_view display_name(ModelVariant variant) {
  switch (variant) {
    case ModelVariant::DeepSeekV4: return "DeepSeek-V4";
  }
  fail("display_name: unknown ModelVariant ", static_cast<int>(variant));
}

std::optional<ModelVariant> model_variant_for(std::string_view model_type) {
  const KnownModelType* known = find_known(model_type);
  return known ? known->variant : std::nullopt;
}

std::string unsupported_model_type_reason(std::string_view model_type) {
  const KnownModelType* known = find_known(model_type);
  if (known && !known->variant)
    return cat("'", model_type, "' is ", known->family, ", which Strata does not support yet (",
               known->not_supported_because, "); supported model_type: ", supported_list());
  return cat("unknown model_type '", model_type, "'; supported model_type: ", supported_list());
}

}  // namespace strata::model
