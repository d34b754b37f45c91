#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace strata::model {
namespace {

using nlohmann::json;
using A = AttentionType;
using M = MlpType;

json minimal(int64_t layers = 5) { return {{"model_type", "deepseek_v4"}, {"num_hidden_layers", layers}}; }

// Parses `j`, expecting a strata::Error whose message contains every one of `needles`.
void expect_error(const json& j, std::initializer_list<std::string> needles) {
  try {
    parse_config(j);
    ADD_FAILURE() << "expected strata::Error for " << j.dump();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

TEST(Config, MinimalMatchesTransformersDefaults) {
  const ModelConfig c = parse_config(minimal(5));
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_attention_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.scoring_func, ScoringFunc::SqrtSoftplus);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
  // __post_init__ for n=5: 2× HCA, then [HCA if i%2==0 else CSA for i in range(3)].
  EXPECT_EQ(c.layer_types, (std::vector<A>{A::HeavilyCompressed, A::HeavilyCompressed, A::HeavilyCompressed,
                                           A::CompressedSparse, A::HeavilyCompressed}));
  EXPECT_EQ(c.mlp_layer_types, (std::vector<M>{M::HashMoe, M::HashMoe, M::HashMoe, M::Moe, M::Moe}));
  EXPECT_EQ(c.csa_compress_rate, 4);
  EXPECT_EQ(c.hca_compress_rate, 128);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.125);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.rope_main.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_compress.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, 160000.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.partial_rotary_factor, 0.125);
  EXPECT_EQ(c.pad_token_id, std::nullopt);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_FALSE(c.quantization.has_value());
  EXPECT_EQ(c.compress_rate(0), 128);
  EXPECT_EQ(c.compress_rate(3), 4);
  EXPECT_EQ(&c.rope_for_layer(3), &c.rope_compress);
}

TEST(Config, DefaultStructEqualsParsedDefaults) {
  EXPECT_EQ(parse_config({{"model_type", "deepseek_v4"}}), ModelConfig{});
  EXPECT_EQ(ModelConfig{}.layer_types.size(), 43u);
}

TEST(Config, ShortModelsClampDefaults) {
  const ModelConfig c = parse_config(minimal(1));
  EXPECT_EQ(c.layer_types, std::vector<A>{A::HeavilyCompressed});
  EXPECT_EQ(c.mlp_layer_types, std::vector<M>{M::HashMoe});
}

TEST(Config, LegacyCompressRatiosAndRates) {
  json j = minimal(4);
  j["compress_ratios"] = {0, 4, 128, 4, 0};  // trailing MTP entry is dropped, as in transformers
  j["compress_rate_csa"] = 8;
  j["compress_rate_hca"] = 64;
  const ModelConfig c = parse_config(j);
  EXPECT_EQ(c.layer_types,
            (std::vector<A>{A::Sliding, A::CompressedSparse, A::HeavilyCompressed, A::CompressedSparse}));
  EXPECT_EQ(c.csa_compress_rate, 8);
  EXPECT_EQ(c.hca_compress_rate, 64);
  EXPECT_EQ(c.compress_rate(0), 0);
  EXPECT_EQ(c.compress_rate(1), 8);
  EXPECT_EQ(c.compress_rate(2), 64);
  EXPECT_EQ(&c.rope_for_layer(0), &c.rope_main);
  EXPECT_EQ(&c.rope_for_layer(2), &c.rope_compress);
}

TEST(Config, ExplicitLayerTypesBeatCompressRatios) {
  json j = minimal(2);
  j["compress_ratios"] = {4, 4};
  j["layer_types"] = {"sliding_attention", "heavily_compressed_attention", "sliding_attention"};
  EXPECT_EQ(parse_config(j).layer_types, (std::vector<A>{A::Sliding, A::HeavilyCompressed}));
  j["compress_ratios"] = {4};  // ignored next to layer_types (as in transformers), so its length does not matter
  EXPECT_NO_THROW(parse_config(j));
}

TEST(Config, LegacyNumHashLayers) {
  json j = minimal(4);
  j["num_hash_layers"] = 1;
  EXPECT_EQ(parse_config(j).mlp_layer_types, (std::vector<M>{M::HashMoe, M::Moe, M::Moe, M::Moe}));
  j["num_hash_layers"] = 0;
  EXPECT_EQ(parse_config(j).mlp_layer_types, (std::vector<M>(4, M::Moe)));
}

TEST(Config, LegacyQkRopeHeadDim) {
  json j = minimal();
  j["head_dim"] = 256;
  j["qk_rope_head_dim"] = 64;
  ModelConfig c = parse_config(j);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_DOUBLE_EQ(c.rope_main.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c.rope_compress.partial_rotary_factor, 0.25);
  // An explicit partial_rotary_factor wins, and qk_rope_head_dim is re-derived from it.
  j["partial_rotary_factor"] = 0.5;
  c = parse_config(j);
  EXPECT_EQ(c.qk_rope_head_dim, 128);
}

TEST(Config, FlatRopeScalingYarnFoldsIntoCompress) {
  json j = minimal();
  j["rope_theta"] = 10000;
  j["compress_rope_theta"] = 160000;
  j["max_position_embeddings"] = 1048576;
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                       {"beta_fast", 32}, {"beta_slow", 1}};
  const ModelConfig c = parse_config(j);
  EXPECT_EQ(c.rope_main.rope_type, "default");
  EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_compress.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, 160000.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 65536);
  EXPECT_DOUBLE_EQ(c.rope_compress.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.beta_slow, 1.0);
  // The V4 rule: no YaRN mscale on cos/sin.
  ASSERT_TRUE(c.rope_compress.attention_factor.has_value());
  EXPECT_DOUBLE_EQ(*c.rope_compress.attention_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_compress.effective_attention_factor(), 1.0);
}

TEST(Config, FlatRopeParametersYarnDefaultsOriginalMaxPositions) {
  json j = minimal();
  j["max_position_embeddings"] = 4096;
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", 0.5}, {"rope_theta", 1.0}};
  const ModelConfig c = parse_config(j);
  EXPECT_EQ(c.rope_compress.original_max_position_embeddings, 4096);  // standardize_rope_params' setdefault
  EXPECT_DOUBLE_EQ(*c.rope_compress.attention_factor, 0.5);            // an explicit value is kept
  EXPECT_DOUBLE_EQ(c.rope_compress.rope_theta, 160000.0);              // compress_rope_theta overrides
}

TEST(Config, NestedRopeParameters) {
  json j = minimal();
  j["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", 20000.0}, {"partial_rotary_factor", 0.125}}},
      {"compress",
       {{"rope_type", "yarn"}, {"rope_theta", 160000.0}, {"factor", 16}, {"original_max_position_embeddings", 65536},
        {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"truncate", false}}}};
  const ModelConfig c = parse_config(j);
  EXPECT_DOUBLE_EQ(c.rope_main.rope_theta, 20000.0);
  EXPECT_EQ(c.rope_compress.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
  EXPECT_FALSE(c.rope_compress.truncate);  // stored as written; see the RopeParams comment
  // __post_init__ only injects attention_factor on the flat path; here transformers derives it from mscale.
  EXPECT_FALSE(c.rope_compress.attention_factor.has_value());
  EXPECT_DOUBLE_EQ(c.rope_compress.effective_attention_factor(), 1.0);  // mscale == mscale_all_dim
  EXPECT_DOUBLE_EQ(c.rope_compress.partial_rotary_factor, 0.125);
}

TEST(Config, YarnMscaleRule) {
  RopeParams r;
  r.rope_type = "yarn";
  r.factor = 16.0;
  EXPECT_NEAR(r.effective_attention_factor(), 0.1 * std::log(16.0) + 1.0, 1e-12);
}

TEST(Config, QuantizationAndExtras) {
  json j = minimal();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                              {"weight_block_size", {128, 128}}, {"scale_fmt", "ue8m0"}};
  j["expert_dtype"] = "fp4";
  j["torch_dtype"] = "bfloat16";
  j["architectures"] = {"DeepseekV4ForCausalLM"};
  j["transformers_version"] = "5.17.0";
  j["topk_method"] = "noaux_tc";
  j["n_group"] = 8;
  j["eos_token_id"] = {1, 2};
  j["num_local_experts"] = 256;
  const ModelConfig c = parse_config(j);
  ASSERT_TRUE(c.quantization.has_value());
  EXPECT_EQ(c.quantization->method, "fp8");
  EXPECT_EQ(c.quantization->weight_block_size, (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(c.quantization->scale_fmt, "ue8m0");
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.dtype, "bfloat16");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 2}));
}

// The shape of DeepSeek's own V4-Flash config.json: legacy keys only, 43 layers + 1 MTP entry in compress_ratios.
TEST(Config, DeepSeekFlashStyleConfig) {
  const json j = json::parse(R"({
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 129280, "hidden_size": 4096, "moe_intermediate_size": 2048, "num_hidden_layers": 43,
    "num_attention_heads": 64, "num_key_value_heads": 1, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 6, "first_k_dense_replace": 0, "max_position_embeddings": 1048576,
    "rms_norm_eps": 1e-6, "rope_theta": 10000, "q_lora_rank": 1024, "qk_rope_head_dim": 64, "head_dim": 512,
    "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128,
                        4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0],
    "sliding_window": 128, "compress_rope_theta": 160000, "o_lora_rank": 1024, "o_groups": 8,
    "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "num_hash_layers": 3, "hc_mult": 4,
    "hc_eps": 1e-6, "hc_sinkhorn_iters": 20, "swiglu_limit": 10.0, "routed_scaling_factor": 1.5,
    "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "hidden_act": "silu", "norm_topk_prob": true,
    "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "num_nextn_predict_layers": 1, "expert_dtype": "fp4",
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 65536,
                     "type": "yarn"},
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
  })");
  const ModelConfig c = parse_config(j);
  ASSERT_EQ(c.layer_types.size(), 43u);
  EXPECT_EQ(c.layer_types[0], A::Sliding);
  EXPECT_EQ(c.layer_types[1], A::Sliding);
  EXPECT_EQ(c.layer_types[2], A::CompressedSparse);
  EXPECT_EQ(c.layer_types[42], A::CompressedSparse);
  EXPECT_EQ(c.mlp_layer_types[2], M::HashMoe);
  EXPECT_EQ(c.mlp_layer_types[3], M::Moe);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.rope_compress.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_for_layer(2).rope_theta, 160000.0);
  EXPECT_DOUBLE_EQ(c.rope_for_layer(0).rope_theta, 10000.0);
  EXPECT_EQ(c.quantization->scale_fmt, "ue8m0");
  EXPECT_EQ(parse_config(config_to_json(c)), c);
}

TEST(Config, RoundTrip) {
  json j = minimal(6);
  j["compress_ratios"] = {0, 0, 4, 128, 4, 128, 0};
  j["num_hash_layers"] = 2;
  j["hidden_size"] = 256;
  j["head_dim"] = 128;
  j["qk_rope_head_dim"] = 32;
  j["index_head_dim"] = 64;
  j["pad_token_id"] = 3;
  j["eos_token_id"] = {1, 7};
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 256}};
  j["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {64, 128}}};
  j["expert_dtype"] = "fp4";
  const ModelConfig c = parse_config(j);
  const json out = config_to_json(c);
  EXPECT_EQ(out["model_type"], "deepseek_v4");
  EXPECT_TRUE(out["rope_parameters"].contains("main"));
  EXPECT_EQ(out["layer_types"].size(), 6u);
  EXPECT_EQ(parse_config(out), c);
  EXPECT_EQ(parse_config(json::parse(out.dump())), c);  // through text as well
  EXPECT_EQ(parse_config(config_to_json(ModelConfig{})), ModelConfig{});
}

TEST(Config, LoadConfigNamesPath) {
  const std::string path = ::testing::TempDir() + "strata_config_test.json";
  {
    std::ofstream(path) << R"({"model_type": "deepseek_v4", "num_hidden_layers": 2, "hidden_sise": 4})";
  }
  try {
    load_config(path);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hidden_sise"), std::string::npos) << e.what();
  }
  { std::ofstream(path) << "{ not json"; }
  try {
    load_config(path);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  { std::ofstream(path) << config_to_json(parse_config(minimal(3))).dump(); }
  EXPECT_EQ(load_config(path).num_hidden_layers, 3);
  std::remove(path.c_str());
  EXPECT_THROW(load_config(path), Error);
}

// ---- one test per error class; each asserts the message names the field ----

// A checkpoint's config.json must give the sizes of its tensors; a missing one is named, not defaulted.
TEST(Config, LoadConfigRequiresTheWeightSizes) {
  const std::string path = ::testing::TempDir() + "strata_config_sizes_test.json";
  json j = config_to_json(parse_config(minimal(3)));
  j.erase("hidden_size");
  { std::ofstream(path) << j.dump(); }
  try {
    load_config(path);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'hidden_size': missing"), std::string::npos) << e.what();
  }
  j["hidden_size"] = nullptr;
  { std::ofstream(path) << j.dump(); }
  EXPECT_THROW(load_config(path), Error);
  std::remove(path.c_str());
  EXPECT_NO_THROW(parse_config(minimal(3)));  // parse_config keeps transformers' defaults
}

TEST(Config, ErrorEosOutsideTheVocabulary) {
  json j = minimal();
  j["vocab_size"] = 1000;
  j["eos_token_id"] = 1000;
  expect_error(j, {"'eos_token_id'", "1000", "outside the vocabulary [0, 1000)"});
  j["eos_token_id"] = {1, -1};
  expect_error(j, {"'eos_token_id'", "-1"});
  j["eos_token_id"] = 999;
  EXPECT_NO_THROW(parse_config(j));
}

TEST(Config, ErrorWrongModelType) {
  expect_error({{"model_type", "deepseek_v3"}}, {"model_type", "deepseek_v3"});
  expect_error({{"num_hidden_layers", 2}}, {"model_type", "missing"});
}

TEST(Config, ErrorUnknownKey) {
  json j = minimal();
  j["num_hiden_layers"] = 3;
  expect_error(j, {"'num_hiden_layers'", "unknown"});
  j = minimal();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 2}, {"fudge", 1}};
  expect_error(j, {"rope_scaling.fudge"});
}

TEST(Config, ErrorWrongType) {
  json j = minimal();
  j["hidden_size"] = "4096";
  expect_error(j, {"'hidden_size'", "expected an integer", "string"});
  j = minimal();
  j["hidden_size"] = 4096.0;
  expect_error(j, {"'hidden_size'", "expected an integer"});
  j = minimal();
  j["norm_topk_prob"] = 1;
  expect_error(j, {"'norm_topk_prob'", "expected a boolean"});
  j = minimal();
  j["eos_token_id"] = {1, "2"};
  expect_error(j, {"'eos_token_id[1]'"});
}

TEST(Config, ErrorBadLayerType) {
  json j = minimal(4);
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "foo"};
  expect_error(j, {"config.json: field 'layer_types[3]': expected one of sliding_attention, "
                   "compressed_sparse_attention, heavily_compressed_attention, found 'foo'"});
  j = minimal(2);
  j["compress_ratios"] = {0, 16};
  expect_error(j, {"'compress_ratios[1]'", "16"});
  j = minimal(2);
  j["mlp_layer_types"] = {"moe", "dense"};
  expect_error(j, {"'mlp_layer_types[1]'", "dense"});
  j = minimal();
  j["scoring_func"] = "relu";
  expect_error(j, {"'scoring_func'", "relu"});
}

TEST(Config, ErrorShortList) {
  json j = minimal(5);
  j["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention"};
  expect_error(j, {"'layer_types'", "3 entries", "num_hidden_layers is 5"});
  j = minimal(5);
  j["mlp_layer_types"] = {"moe"};
  expect_error(j, {"'mlp_layer_types'"});
  j = minimal(3);
  j["compress_ratios"] = {0, 4};
  expect_error(j, {"'compress_ratios'", "2 entries"});
}

TEST(Config, ErrorBadYarn) {
  json j = minimal();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 0.5}, {"original_max_position_embeddings", 4096}};
  expect_error(j, {"'rope_scaling.factor'", ">= 1"});
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 0}};
  expect_error(j, {"'rope_scaling.original_max_position_embeddings'"});
  j["rope_scaling"] = {{"type", "yarn"}};
  expect_error(j, {"'rope_scaling.factor'", "required"});
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4}};
  expect_error(j, {"'rope_scaling.type'", "linear"});
  j = minimal();
  j["rope_parameters"] = {{"main", {{"rope_type", "default"}}}};
  expect_error(j, {"'rope_parameters.compress'", "missing"});
}

TEST(Config, ErrorOGroupsNotDividing) {
  json j = minimal();
  j["num_attention_heads"] = 3;
  j["head_dim"] = 6;
  j["qk_rope_head_dim"] = 2;
  j["o_groups"] = 4;
  expect_error(j, {"'o_groups'", "must divide"});
}

TEST(Config, ErrorConsistency) {
  auto with = [](const char* key, json value) {
    json j = minimal();
    j[key] = std::move(value);
    return j;
  };
  expect_error(with("num_key_value_heads", 2), {"'num_key_value_heads'"});
  expect_error(with("n_shared_experts", 2), {"'n_shared_experts'", "0 or 1"});
  expect_error(with("num_experts_per_tok", 300), {"'num_experts_per_tok'", "n_routed_experts"});
  expect_error(with("hidden_size", 0), {"'hidden_size'", "positive"});
  expect_error(with("hidden_act", "gelu"), {"'hidden_act'", "gelu"});
  expect_error(with("qk_rope_head_dim", 63), {"'qk_rope_head_dim'", "even"});
  expect_error(with("head_dim", 511), {"'head_dim'", "even"});
  expect_error(with("compress_rate_csa", 0), {"compress_rates.compressed_sparse_attention"});
  expect_error(with("sliding_window", 0), {"'sliding_window'"});
  expect_error(with("index_topk", 0), {"'index_topk'"});
  expect_error(with("hc_mult", 0), {"'hc_mult'"});
  expect_error(with("quantization_config", {{"quant_method", "gptq"}}), {"'quantization_config.quant_method'", "gptq"});
  expect_error(with("first_k_dense_replace", 1), {"'first_k_dense_replace'"});
}

}  // namespace
}  // namespace strata::model
