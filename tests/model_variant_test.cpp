// config.json's model_type names the model variant (model/model_variant.h): DeepSeek-V4 is read, DeepSeek-V4.1
// is recognised and refused until Strata implements it, anything else is refused naming the value.
#include "model/model_variant.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "model/config.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"

namespace strata::model {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The error parse_config raises for `j`, or "" when it parses.
std::string parse_error(const json& j) {
  try {
    parse_config(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, std::initializer_list<std::string> needles) {
  for (const std::string& n : needles) EXPECT_NE(text.find(n), std::string::npos) << "'" << n << "' not in: " << text;
}

TEST(ModelVariant, DeepSeekV4IsTheVariantOfModelTypeDeepseekV4) {
  const ModelConfig c = parse_config({{"model_type", "deepseek_v4"}, {"num_hidden_layers", 3}});
  EXPECT_EQ(c.variant, ModelVariant::DeepSeekV4);
  EXPECT_EQ(c.model_type, "deepseek_v4");
  EXPECT_EQ(config_to_json(c)["model_type"], "deepseek_v4");
  EXPECT_EQ(parse_config(config_to_json(c)), c);
}

// Every config.json the repository ships or writes still loads, as DeepSeek-V4.
TEST(ModelVariant, CommittedConfigsAreDeepSeekV4) {
  const fs::path fixtures = STRATA_FIXTURES;
  for (const fs::path& dir : {fixtures / "a_hc4", fixtures / "c_short", fixtures / ".." / ".." / "models" / "demo"}) {
    if (!fs::exists(dir / "config.json")) continue;  // models/demo/ may be absent from a checkout
    const ModelConfig c = load_config(dir.string());
    EXPECT_EQ(c.variant, ModelVariant::DeepSeekV4) << dir;
    EXPECT_EQ(c.model_type, "deepseek_v4") << dir;
  }
  // What `strata model init` writes.
  const fs::path dir = fs::temp_directory_path() / "strata_model_variant_init";
  fs::remove_all(dir);
  v4::write_random_checkpoint(v4::preset_config("tiny"), dir.string(), 1, DType::F32);
  std::ifstream written(dir / "config.json");
  EXPECT_EQ(json::parse(written)["model_type"], "deepseek_v4");
  EXPECT_EQ(load_config(dir.string()).variant, ModelVariant::DeepSeekV4);
  fs::remove_all(dir);
}

TEST(ModelVariant, DeepSeekV41IsRecognisedButRefused) {
  for (const char* model_type : {"deepseek_v41", "deepseek_v4_1"}) {
    const std::string error = parse_error({{"model_type", model_type}, {"num_hidden_layers", 3}});
    expect_contains(error, {"config.json: field 'model_type': '", model_type, "' is DeepSeek-V4.1",
                            "not support yet", "supported model_type: 'deepseek_v4'"});
    EXPECT_EQ(model_variant_for(model_type), std::nullopt);
  }
  // A V4.1-shaped file (composite text + vision config) is refused for its model_type, not for its keys.
  const std::string error = parse_error({{"model_type", "deepseek_v41"},
                                         {"architectures", {"DeepseekV41ForCausalLM"}},
                                         {"text_config", {{"hidden_size", 5120}}},
                                         {"vision_config", {{"num_hidden_layers", 32}}}});
  expect_contains(error, {"'model_type'", "DeepSeek-V4.1", "not support yet"});
  EXPECT_EQ(error.find("unknown key"), std::string::npos) << error;
}

TEST(ModelVariant, OtherModelTypesAreRefusedByName) {
  for (const char* model_type : {"deepseek_v3", "llama", "DeepSeek_V4", ""}) {
    const std::string error = parse_error({{"model_type", model_type}});
    expect_contains(error, {"field 'model_type'", std::string("unknown model_type '") + model_type + "'",
                            "supported model_type: 'deepseek_v4' (DeepSeek-V4)"});
  }
  expect_contains(parse_error({{"model_type", 4}}), {"'model_type'", "expected a string, found integer 4"});
}

// No model_type: refused, as before. Every DeepSeek-V4 config.json published by transformers or DeepSeek names
// it; DeepSeek's inference/config.json has none but is another format (ModelArgs), and the error says so.
TEST(ModelVariant, MissingModelTypeIsRefused) {
  expect_contains(parse_error({{"num_hidden_layers", 2}}), {"field 'model_type': missing; expected 'deepseek_v4'"});
  EXPECT_EQ(parse_error({{"num_hidden_layers", 2}}).find("inference/config.json"), std::string::npos);
  expect_contains(parse_error({{"dim", 4096}, {"n_layers", 43}, {"route_scale", 1.5}}),
                  {"field 'model_type': missing", "DeepSeek's inference/config.json (it has 'dim')",
                   "Hugging Face config.json"});
}

TEST(ModelVariant, NamesAndLookup) {
  EXPECT_EQ(model_type_of(ModelVariant::DeepSeekV4), "deepseek_v4");
  EXPECT_EQ(display_name(ModelVariant::DeepSeekV4), "DeepSeek-V4");
  EXPECT_EQ(model_variant_for("deepseek_v4"), ModelVariant::DeepSeekV4);
  EXPECT_EQ(model_variant_for("deepseek_v3"), std::nullopt);
  expect_contains(unsupported_model_type_reason("qwen3"), {"unknown model_type 'qwen3'", "'deepseek_v4'"});
}

TEST(ModelVariant, WithModelVariantPassesTheVariantAsACompileTimeConstant) {
  const ModelConfig c = parse_config({{"model_type", "deepseek_v4"}, {"num_hidden_layers", 2}});
  const std::string picked = with_model_variant(c.variant, [](auto variant) -> std::string {
    static_assert(std::is_same_v<decltype(variant), std::integral_constant<ModelVariant, ModelVariant::DeepSeekV4>>);
    if constexpr (decltype(variant)::value == ModelVariant::DeepSeekV4) return "deepseek_v4 implementation";
  });
  EXPECT_EQ(picked, "deepseek_v4 implementation");
}

}  // namespace
}  // namespace strata::model
