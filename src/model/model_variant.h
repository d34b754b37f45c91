#pragma once
// Which model a checkpoint holds. config.json's `model_type` names a variant of the DeepSeek family; the variant
// picks the model implementation (one folder under src/model/) that runs it. ModelConfig carries it
// (model/config.h); the CLI and the server can branch on it with with_model_variant below.
//
// Recognised model_type values:
//   "deepseek_v4"                    DeepSeek-V4-Flash / -Pro: supported (src/model/deepseek_v4/)
//   "deepseek_v41", "deepseek_v4_1"  DeepSeek-V4.1(-Flash): recognised, refused until Strata implements it
// A config.json without model_type is refused too: every DeepSeek-V4 config.json that transformers or DeepSeek
// publishes names it, and DeepSeek's inference/config.json (ModelArgs keys such as "dim") is not this format.
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace strata::model {

// The variants Strata runs. Adding one is a compile error (-Wswitch) at every switch that must learn about it.
enum class ModelVariant {
  DeepSeekV4,  // model_type "deepseek_v4"
};

// config.json's spelling of the variant's model_type ("deepseek_v4") and the family's name ("DeepSeek-V4").
std::string_view model_type_of(ModelVariant variant);
std::string_view display_name(ModelVariant variant);

// The variant a model_type names; nullopt when Strata does not run it (unsupported_model_type_reason says why).
std::optional<ModelVariant> model_variant_for(std::string_view model_type);

// Why `model_type` is refused: for a recognised variant that is not supported yet, that it is not supported yet;
// otherwise that the value is unknown. Either way the message names the value and the supported model types.
std::string unsupported_model_type_reason(std::string_view model_type);

// Calls `pick(variant)` with the variant as a compile-time constant (std::integral_constant), so code above model/
// chooses a model implementation in one place, and every implementation's types stay apart:
//
//   auto model = with_model_variant(config.variant, [&](auto variant) -> std::unique_ptr<Model> {
//     if constexpr (decltype(variant)::value == ModelVariant::DeepSeekV4) return load_deepseek_v4(dir);
//   });
//
// Every branch of `pick` must return the same type.
template <typename Pick>
decltype(auto) with_model_variant(ModelVariant variant, Pick&& pick) {
  switch (variant) {
    case ModelVariant::DeepSeekV4:
      return pick(std::integral_constant<ModelVariant, ModelVariant::DeepSeekV4>{});
  }
  fail("with_model_variant: unknown ModelVariant ", static_cast<int>(variant));
}

}  // namespace strata::model
