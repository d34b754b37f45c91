#include "model/deepseek_v4/presets.h"

#include "core/error.h"

namespace strata::model::v4 {

std::vector<std::string> preset_names() { return {"tiny", "small", "flash"}; }

namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 512;
  c.hidden_size = 64;
  c.moe_intermediate_size = 32;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.head_dim = 64;
  c.q_lora_rank = 32;
  c.num_experts_per_tok = 2;
  c.n_routed_experts = 8;
  c.o_groups = 2;
  c.o_lora_rank = 32;
  c.index_n_heads = 16;
  c.index_head_dim = 32;
  c.index_topk = 8;
  c.partial_rotary_factor = 0.25;  // 16 rotary channels per head
  c.qk_rope_head_dim = 16;
  c.sliding_window = 128;
  c.csa_compress_rate = 4;
  c.hca_compress_rate = 128;
  c.hc_sinkhorn_iters = 20;
  c.max_position_embeddings = 4096;
  c.layer_types = {AttentionType::Sliding, AttentionType::CompressedSparse, AttentionType::HeavilyCompressed,
                   AttentionType::CompressedSparse};
  c.mlp_layer_types = {MlpType::HashMoe, MlpType::Moe, MlpType::Moe, MlpType::Moe};
  c.rope_main = RopeParams{.rope_type = "default", .rope_theta = 10000.0, .partial_rotary_factor = 0.25};
  c.rope_compress = RopeParams{.rope_type = "yarn",
                               .rope_theta = 160000.0,
                               .partial_rotary_factor = 0.25,
                               .factor = 16.0,
                               .original_max_position_embeddings = 256,
                               .attention_factor = 1.0};
  c.num_nextn_predict_layers = 0;
  return c;
}

// A CPU-benchmark size (~125M parameters): the tiny schedule at 8 layers with wider everything.
ModelConfig small() {
  ModelConfig c = tiny();
  c.vocab_size = 16384;
  c.hidden_size = 512;
  c.moe_intermediate_size = 256;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 8;
  c.head_dim = 128;
  c.q_lora_rank = 256;
  c.num_experts_per_tok = 4;
  c.n_routed_experts = 32;
  c.o_groups = 4;
  c.o_lora_rank = 128;
  c.index_n_heads = 16;
  c.index_head_dim = 64;
  c.index_topk = 64;
  c.partial_rotary_factor = 0.5;  // 64 rotary channels, as in V4
  c.qk_rope_head_dim = 64;
  c.rope_main.partial_rotary_factor = 0.5;
  c.rope_compress.partial_rotary_factor = 0.5;
  c.layer_types.clear();
  c.mlp_layer_types.clear();
  for (int l = 0; l < 8; ++l) {
    c.layer_types.push_back(tiny().layer_types[static_cast<size_t>(l % 4)]);
    c.mlp_layer_types.push_back(l < 2 ? MlpType::HashMoe : MlpType::Moe);
  }
  return c;
}

// DeepSeek-V4-Flash (43 layers, hidden 4096, 64 heads of 512, 256 experts of 2048, top-6).
ModelConfig flash() {
  ModelConfig c;  // the struct's defaults are V4-Flash's
  c.rope_compress = RopeParams{.rope_type = "yarn",
                               .rope_theta = 160000.0,
                               .partial_rotary_factor = 0.125,
                               .factor = 16.0,
                               .original_max_position_embeddings = 65536,
                               .attention_factor = 1.0};
  c.num_nextn_predict_layers = 0;
  return c;
}

}  // namespace

ModelConfig preset_config(const std::string& name, int64_t layers) {
  ModelConfig c;
  if (name == "tiny")
    c = tiny();
  else if (name == "small")
    c = small();
  else if (name == "flash")
    c = flash();
  else
    fail("unknown preset '", name, "' (expected tiny, small or flash)");
  if (layers > 0) {
    const int64_t n = c.num_hidden_layers;
    c.num_hidden_layers = layers;
    std::vector<AttentionType> types;
    std::vector<MlpType> mlps;
    for (int64_t l = 0; l < layers; ++l) {
      types.push_back(c.layer_types[static_cast<size_t>(l % n)]);
      mlps.push_back(l < n ? c.mlp_layer_types[static_cast<size_t>(l)] : MlpType::Moe);
    }
    c.layer_types = types;
    c.mlp_layer_types = mlps;
  } else if (layers < 0) {
    fail("--layers must be positive, got ", layers);
  }
  return c;
}

}  // namespace strata::model::v4
