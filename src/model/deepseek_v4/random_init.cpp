#include "model/deepseek_v4/random_init.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "model/safetensors.h"

namespace strata::model::v4 {

namespace {

// How a tensor's values are drawn.
enum class Init { Linear, Embedding, Norm, Sink, PositionBias, HcFn, HcBase, HcScale, CorrectionBias, TokenToExpert };

struct Param {
  TensorSpec spec;
  Init init;
};

// splitmix64: a tiny, portable generator, so a seed gives the same checkpoint on every machine.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform()); }
};

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name, mixed with the seed
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<Param> model_params(const ModelConfig& c, DType mdt) {
  std::vector<Param> ps;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, Init init, DType dt = DType::F32) {
    ps.push_back({{name, dt, std::move(shape)}, init});
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) { add(name, {out, in}, Init::Linear, mdt); };
  const int64_t d = c.hidden_size, hc = c.hc_mult, mix = (2 + hc) * hc, heads = c.num_attention_heads, hd = c.head_dim;
  add("embed.weight", {c.vocab_size, d}, Init::Embedding, mdt);
  linear("head.weight", c.vocab_size, d);
  add("norm.weight", {d}, Init::Norm);
  add("hc_head_fn", {hc, hc * d}, Init::HcFn);
  add("hc_head_base", {hc}, Init::HcBase);
  add("hc_head_scale", {1}, Init::HcScale);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "layers." + std::to_string(l);
    for (const char* site : {"attn", "ffn"}) {
      add(p + ".hc_" + site + "_fn", {mix, hc * d}, Init::HcFn);
      add(p + ".hc_" + site + "_base", {mix}, Init::HcBase);
      add(p + ".hc_" + site + "_scale", {3}, Init::HcScale);
    }
    add(p + ".attn_norm.weight", {d}, Init::Norm);
    add(p + ".ffn_norm.weight", {d}, Init::Norm);
    const std::string a = p + ".attn";
    linear(a + ".wq_a.weight", c.q_lora_rank, d);
    add(a + ".q_norm.weight", {c.q_lora_rank}, Init::Norm);
    linear(a + ".wq_b.weight", heads * hd, c.q_lora_rank);
    linear(a + ".wkv.weight", hd, d);
    add(a + ".kv_norm.weight", {hd}, Init::Norm);
    linear(a + ".wo_a.weight", c.o_groups * c.o_lora_rank, heads * hd / c.o_groups);
    linear(a + ".wo_b.weight", d, c.o_groups * c.o_lora_rank);
    add(a + ".attn_sink", {heads}, Init::Sink);
    auto compressor = [&](const std::string& q, int64_t rate, int64_t dim, bool overlap) {
      const int64_t width = overlap ? 2 * dim : dim;
      linear(q + ".wkv.weight", width, d);
      linear(q + ".wgate.weight", width, d);
      add(q + ".ape", {rate, width}, Init::PositionBias);
      add(q + ".norm.weight", {dim}, Init::Norm);
    };
    const AttentionType t = c.layer_types[static_cast<size_t>(l)];
    if (t != AttentionType::Sliding) compressor(a + ".compressor", c.compress_rate(l), hd, t == AttentionType::CompressedSparse);
    if (t == AttentionType::CompressedSparse) {
      linear(a + ".indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      linear(a + ".indexer.weights_proj.weight", c.index_n_heads, d);
      compressor(a + ".indexer.compressor", c.compress_rate(l), c.index_head_dim, true);
    }
    const std::string f = p + ".ffn";
    linear(f + ".gate.weight", c.n_routed_experts, d);
    if (c.mlp_layer_types[static_cast<size_t>(l)] == MlpType::HashMoe)
      add(f + ".gate.tid2eid", {c.vocab_size, c.num_experts_per_tok}, Init::TokenToExpert, DType::I64);
    else
      add(f + ".gate.bias", {c.n_routed_experts}, Init::CorrectionBias);
    auto expert = [&](const std::string& q) {
      linear(q + ".w1.weight", c.moe_intermediate_size, d);
      linear(q + ".w2.weight", d, c.moe_intermediate_size);
      linear(q + ".w3.weight", c.moe_intermediate_size, d);
    };
    for (int64_t e = 0; e < c.n_routed_experts; ++e) expert(f + ".experts." + std::to_string(e));
    if (c.n_shared_experts > 0) expert(f + ".shared_experts");
  }
  return ps;
}

void fill_values(const Param& p, const ModelConfig& c, uint64_t seed, std::vector<uint8_t>& bytes) {
  Rng rng{name_seed(seed, p.spec.name)};
  const auto& shape = p.spec.shape;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (p.init == Init::TokenToExpert) {
    // k distinct experts per token: a partial Fisher-Yates shuffle of the expert ids.
    const int64_t k = shape[1];
    std::vector<int64_t> ids(static_cast<size_t>(c.n_routed_experts)), out;
    out.reserve(static_cast<size_t>(n));
    for (int64_t v = 0; v < shape[0]; ++v) {
      std::iota(ids.begin(), ids.end(), 0);
      for (int64_t j = 0; j < k; ++j) {
        const auto r = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(c.n_routed_experts - j));
        std::swap(ids[j], ids[j + r]);
        out.push_back(ids[j]);
      }
    }
    bytes.resize(out.size() * 8);
    std::memcpy(bytes.data(), out.data(), bytes.size());
    return;
  }
  std::vector<float> v(static_cast<size_t>(n));
  const double fan_in = shape.size() == 2 ? static_cast<double>(shape[1]) : 1.0;
  for (float& x : v) {
    switch (p.init) {
      case Init::Linear: x = static_cast<float>(rng.normal() / std::sqrt(fan_in)); break;
      case Init::Embedding: x = static_cast<float>(rng.normal()); break;
      case Init::Norm: x = static_cast<float>(1.0 + 0.1 * rng.normal()); break;
      case Init::Sink: x = static_cast<float>(rng.normal()); break;
      case Init::PositionBias: x = static_cast<float>(0.5 * rng.normal()); break;
      case Init::HcFn: x = static_cast<float>(rng.normal() / std::sqrt(fan_in)); break;
      case Init::HcBase: x = static_cast<float>(0.5 * rng.normal()); break;
      case Init::HcScale: x = static_cast<float>(0.5 + rng.uniform()); break;
      case Init::CorrectionBias: x = static_cast<float>(0.1 * rng.normal()); break;
      case Init::TokenToExpert: break;
    }
  }
  if (p.spec.dtype == DType::BF16) {
    bytes.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = f32_to_bf16(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else {
    bytes.resize(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
  }
}

}  // namespace

void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype) {
  if (matrix_dtype != DType::F32 && matrix_dtype != DType::BF16)
    fail("model init: --dtype must be f32 or bf16, got ", dtype_name(matrix_dtype));
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/config.json");
    if (!out) fail(dir, "/config.json: cannot open for writing");
    out << config_to_json(config).dump(2) << "\n";
  }
  const std::vector<Param> params = model_params(config, matrix_dtype);
  std::vector<TensorSpec> specs;
  for (const Param& p : params) specs.push_back(p.spec);
  write_safetensors_streaming(
      dir + "/model.safetensors", specs,
      [&](size_t i, std::vector<uint8_t>& bytes) { fill_values(params[i], config, seed, bytes); },
      {{"format", "pt"}, {"producer", "strata model init"}, {"seed", std::to_string(seed)}});
}

}  // namespace strata::model::v4
