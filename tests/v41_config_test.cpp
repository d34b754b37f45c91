// DeepSeek-V4.1's config (src/model/deepseek_v41/config.h) against what the PyTorch reference derives from the same
// config.json (tests/reference/v41_config_fixture.py → tests/fixtures/v41/configs.json).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "model/deepseek_v41/config.h"
#include "test_util.h"

namespace strata::model::v41 {
namespace {

nlohmann::json fixture() {
  std::ifstream in(test::fixture("v41/configs.json"));
  if (!in) throw std::runtime_error("no fixture v41/configs.json");
  return nlohmann::json::parse(in);
}

std::string error_of(const nlohmann::json& config) {
  try {
    parse_v41_config(config);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(V41Config, DerivesTheReferencesScheduleRopeAndTables) {
  const nlohmann::json all = fixture();
  for (const auto& [name, c] : all.items()) {
    const V41Config cfg = parse_v41_config(c["config"]);
    const nlohmann::json& want = c["derived"];
    EXPECT_EQ(cfg.compress_ratios, want["compress_ratios"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(cfg.kv_source_layer_ids, want["kv_source_layer_ids"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(cfg.index_source_layer_ids, want["index_source_layer_ids"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(cfg.candidate_source_layer_id, want["candidate_source_layer_id"].get<int64_t>()) << name;
    EXPECT_EQ(cfg.dspark_target_layer_ids, want["dspark_target_layer_ids"].get<std::vector<int64_t>>()) << name;
    EXPECT_EQ(cfg.engram_num_embeddings, want["engram_num_embeddings"].get<std::vector<int64_t>>()) << name;
    for (const auto& [kind, rope] : {std::pair{"main", &cfg.main_rope}, {"compress", &cfg.compress_rope}}) {
      const auto expected = want["inv_freq"][kind].get<std::vector<float>>();
      const std::vector<float> got = rope_inv_freq(*rope, cfg.qk_rope_head_dim, cfg.max_position_embeddings);
      ASSERT_EQ(got.size(), expected.size()) << name << " " << kind;
      // fp32 in the reference's order; std::pow and torch's may differ in the last bit.
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], expected[i], 2.5e-7 * std::fabs(expected[i])) << name << " " << kind << " pair " << i;
    }
  }
}

TEST(V41Config, TheReleaseReadsAsPublished) {
  const V41Config cfg = parse_v41_config(fixture()["release"]["config"]);
  EXPECT_EQ(cfg.kv_source_of(7), 2);
  EXPECT_EQ(cfg.kv_source_of(39), 20);
  EXPECT_EQ(cfg.kv_source_of(1), -1);
  EXPECT_EQ(cfg.index_source_of(27), 24);
  EXPECT_EQ(cfg.ratio(0), 0);
  EXPECT_EQ(cfg.ratio(20), 1);
  EXPECT_EQ(cfg.compress_rope.type, "yarn");
  EXPECT_EQ(cfg.main_rope.type, "default");
  EXPECT_EQ(cfg.engram.layer_ids, (std::vector<int64_t>{1, 14}));
}

TEST(V41Config, BadConfigsAreNamed) {
  const nlohmann::json base = {{"num_hidden_layers", 8}, {"num_nextn_predict_layers", 1}};
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json c = base;
    c[key] = std::move(v);
    return c;
  };
  EXPECT_NE(error_of(with("compress_ratios", {0, 2})).find("compress_ratios has 2 entries"), std::string::npos);
  EXPECT_NE(error_of(with("compress_ratios", {0, 3, 2, 2, 1, 1, 1, 1})).find("holds 3"), std::string::npos);
  EXPECT_NE(error_of(with("kv_source_layer_ids", {0})).find("kv_source_layer_ids holds 0"), std::string::npos);
  EXPECT_NE(error_of(with("kv_source_layer_ids", {5})).find("no kv source at or before it"), std::string::npos);
  EXPECT_NE(error_of(with("candidate_source_layer_id", 4)).find("not an index source"), std::string::npos);
  EXPECT_NE(error_of(with("hidden_size", "big")).find("hidden_size must be an integer"), std::string::npos);
  EXPECT_NE(error_of(with("scoring_func", "relu")).find("scoring_func 'relu'"), std::string::npos);
  EXPECT_NE(error_of(with("engram_layer_ids", {9})).find("engram_layer_ids holds 9"), std::string::npos);
  nlohmann::json tables = base;
  tables["engram_layer_ids"] = {1};
  tables["engram_num_embeddings"] = {12345};
  EXPECT_NE(error_of(tables).find("differs from the tables the primes give"), std::string::npos);
  EXPECT_NE(error_of({{"model_type", "deepseek_v41"}}).find("without a text_config"), std::string::npos);
  EXPECT_NE(error_of(with("rope_scaling", {{"rope_type", "ntk"}})).find("rope_type 'ntk'"), std::string::npos);
  EXPECT_EQ(error_of(base), "");
}

}  // namespace
}  // namespace strata::model::v41
