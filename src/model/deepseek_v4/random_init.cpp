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
  bool block_scale = false;  // the 128×128 block scales of the FP8 weight listed just before this one
};

constexpr int64_t kBlock = 128;

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
  // FP8 checkpoints keep the vocabulary head and the compressor/indexer projections in BF16, as DeepSeek ships
  // V4-Flash; every other matrix is e4m3 with a `.scale` tensor of per-block multipliers.
  const bool fp8 = mdt == DType::F8_E4M3;
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool quantizable = true) {
    if (!fp8 || !quantizable) {
      add(name, {out, in}, Init::Linear, fp8 ? DType::BF16 : mdt);
      return;
    }
    add(name, {out, in}, Init::Linear, DType::F8_E4M3);
    const std::string base = name.substr(0, name.size() - std::string(".weight").size());
    ps.push_back({{base + ".scale", DType::F32, {(out + kBlock - 1) / kBlock, (in + kBlock - 1) / kBlock}}, Init::Linear, true});
  };
  const int64_t d = c.hidden_size, hc = c.hc_mult, mix = (2 + hc) * hc, heads = c.num_attention_heads, hd = c.head_dim;
  add("embed.weight", {c.vocab_size, d}, Init::Embedding, fp8 ? DType::BF16 : mdt);
  linear("head.weight", c.vocab_size, d, false);
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
      linear(q + ".wkv.weight", width, d, false);
      linear(q + ".wgate.weight", width, d, false);
      add(q + ".ape", {rate, width}, Init::PositionBias);
      add(q + ".norm.weight", {dim}, Init::Norm);
    };
    const AttentionType t = c.layer_types[static_cast<size_t>(l)];
    if (t != AttentionType::Sliding) compressor(a + ".compressor", c.compress_rate(l), hd, t == AttentionType::CompressedSparse);
    if (t == AttentionType::CompressedSparse) {
      linear(a + ".indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      linear(a + ".indexer.weights_proj.weight", c.index_n_heads, d, false);
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

// Block-wise e4m3 quantization: scale = amax(block) / 448, code = round(value / scale).
void quantize_fp8(const std::vector<float>& v, int64_t rows, int64_t cols, std::vector<uint8_t>& codes,
                  std::vector<float>& scales) {
  const int64_t br = (rows + kBlock - 1) / kBlock, bc = (cols + kBlock - 1) / kBlock;
  scales.assign(static_cast<size_t>(br * bc), 0.0f);
  codes.resize(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      float& s = scales[static_cast<size_t>((r / kBlock) * bc + k / kBlock)];
      s = std::max(s, std::fabs(v[static_cast<size_t>(r * cols + k)]));
    }
  for (float& s : scales) s = s > 0 ? s / 448.0f : 1.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(r * cols + k);
      codes[i] = f32_to_fp8_e4m3(v[i] / scales[static_cast<size_t>((r / kBlock) * bc + k / kBlock)]);
    }
}

// k distinct experts per token: a partial Fisher-Yates shuffle of the expert ids.
std::vector<int64_t> draw_token_to_expert(const Param& p, const ModelConfig& c, uint64_t seed) {
  Rng rng{name_seed(seed, p.spec.name)};
  const int64_t vocab = p.spec.shape[0], k = p.spec.shape[1];
  std::vector<int64_t> ids(static_cast<size_t>(c.n_routed_experts)), out;
  out.reserve(static_cast<size_t>(vocab * k));
  for (int64_t v = 0; v < vocab; ++v) {
    std::iota(ids.begin(), ids.end(), 0);
    for (int64_t j = 0; j < k; ++j) {
      const auto r = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(c.n_routed_experts - j));
      std::swap(ids[j], ids[j + r]);
      out.push_back(ids[j]);
    }
  }
  return out;
}

std::vector<float> draw_values(const Param& p, uint64_t seed) {
  Rng rng{name_seed(seed, p.spec.name)};
  const auto& shape = p.spec.shape;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
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
  return v;
}

template <typename T>
void copy_bytes(const std::vector<T>& v, std::vector<uint8_t>& bytes) {
  bytes.resize(v.size() * sizeof(T));
  std::memcpy(bytes.data(), v.data(), bytes.size());
}

void fill_values(const std::vector<Param>& params, size_t index, const ModelConfig& c, uint64_t seed,
                 std::vector<uint8_t>& bytes) {
  const Param& p = params[index];
  if (p.init == Init::TokenToExpert) return copy_bytes(draw_token_to_expert(p, c, seed), bytes);
  if (p.spec.dtype == DType::F8_E4M3 || p.block_scale) {
    // An FP8 weight and its scales come from the same draw; the writer asks for each separately.
    const Param& w = p.block_scale ? params[index - 1] : p;
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    quantize_fp8(draw_values(w, seed), w.spec.shape[0], w.spec.shape[1], codes, scales);
    return p.block_scale ? copy_bytes(scales, bytes) : copy_bytes(codes, bytes);
  }
  const std::vector<float> v = draw_values(p, seed);
  if (p.spec.dtype != DType::BF16) return copy_bytes(v, bytes);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  copy_bytes(h, bytes);
}

}  // namespace

void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype) {
  if (matrix_dtype != DType::F32 && matrix_dtype != DType::BF16 && matrix_dtype != DType::F8_E4M3)
    fail("model init: matrices must be F32, BF16 or F8_E4M3, got ", dtype_name(matrix_dtype));
  ModelConfig cfg = config;
  if (matrix_dtype == DType::F8_E4M3) cfg.quantization = QuantConfig{};
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/config.json");
    if (!out) fail(dir, "/config.json: cannot open for writing");
    out << config_to_json(cfg).dump(2) << "\n";
  }
  const std::vector<Param> params = model_params(cfg, matrix_dtype);
  std::vector<TensorSpec> specs;
  for (const Param& p : params) specs.push_back(p.spec);
  write_safetensors_streaming(
      dir + "/model.safetensors", specs,
      [&](size_t i, std::vector<uint8_t>& bytes) { fill_values(params, i, cfg, seed, bytes); },
      {{"format", "pt"}, {"producer", "strata model init"}, {"seed", std::to_string(seed)}});
}

}  // namespace strata::model::v4
