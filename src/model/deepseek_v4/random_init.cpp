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

// How a matrix is stored: as-is, FP8 e4m3 with 128×128 block scales, or MXFP4 (packed E2M1 pairs, 1×32 blocks).
enum class Storage { Plain, Fp8, Fp4 };

struct Param {
  TensorSpec spec;  // as written to the file
  Init init;
  Storage storage = Storage::Plain;
  std::vector<int64_t> matrix;  // quantized weights and their scales: the logical [out, in] of the matrix
  bool block_scale = false;     // the scales of the quantized weight listed just before this one
};

constexpr int64_t kFp8Block = 128, kFp4Block = 32;

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
    ps.push_back({{name, dt, std::move(shape)}, init, Storage::Plain, {}, false});
  };
  // Quantized checkpoints keep the vocabulary head and the compressor/indexer projections in BF16, as DeepSeek
  // ships V4-Flash. `fp8`: every other matrix is e4m3 with fp32 block scales. `fp4` (the official V4 release's
  // layout): routed experts are MXFP4 and the other matrices e4m3, all scales UE8M0 (powers of two).
  const bool fp8 = mdt == DType::F8_E4M3, fp4 = mdt == DType::F4_E2M1X2, quantized = fp8 || fp4;
  enum Role { Dense, RoutedExpert, KeepBf16 };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, Role role = Dense) {
    if (!quantized || role == KeepBf16) {
      add(name, {out, in}, Init::Linear, quantized ? DType::BF16 : mdt);
      return;
    }
    const std::string base = name.substr(0, name.size() - std::string(".weight").size());
    const DType scale_dtype = fp4 ? DType::F8_E8M0 : DType::F32;
    if (fp4 && role == RoutedExpert) {
      ps.push_back({{name, DType::I8, {out, in / 2}}, Init::Linear, Storage::Fp4, {out, in}, false});
      ps.push_back({{base + ".scale", scale_dtype, {out, (in + kFp4Block - 1) / kFp4Block}}, Init::Linear,
                    Storage::Fp4, {out, in}, true});
      return;
    }
    ps.push_back({{name, DType::F8_E4M3, {out, in}}, Init::Linear, Storage::Fp8, {out, in}, false});
    ps.push_back({{base + ".scale", scale_dtype, {(out + kFp8Block - 1) / kFp8Block, (in + kFp8Block - 1) / kFp8Block}},
                  Init::Linear, Storage::Fp8, {out, in}, true});
  };
  const int64_t d = c.hidden_size, hc = c.hc_mult, mix = (2 + hc) * hc, heads = c.num_attention_heads, hd = c.head_dim;
  add("embed.weight", {c.vocab_size, d}, Init::Embedding, quantized ? DType::BF16 : mdt);
  linear("head.weight", c.vocab_size, d, KeepBf16);
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
      linear(q + ".wkv.weight", width, d, KeepBf16);
      linear(q + ".wgate.weight", width, d, KeepBf16);
      add(q + ".ape", {rate, width}, Init::PositionBias);
      add(q + ".norm.weight", {dim}, Init::Norm);
    };
    const AttentionType t = c.layer_types[static_cast<size_t>(l)];
    if (t != AttentionType::Sliding) compressor(a + ".compressor", c.compress_rate(l), hd, t == AttentionType::CompressedSparse);
    if (t == AttentionType::CompressedSparse) {
      linear(a + ".indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      linear(a + ".indexer.weights_proj.weight", c.index_n_heads, d, KeepBf16);
      compressor(a + ".indexer.compressor", c.compress_rate(l), c.index_head_dim, true);
    }
    const std::string f = p + ".ffn";
    linear(f + ".gate.weight", c.n_routed_experts, d);
    if (c.mlp_layer_types[static_cast<size_t>(l)] == MlpType::HashMoe)
      add(f + ".gate.tid2eid", {c.vocab_size, c.num_experts_per_tok}, Init::TokenToExpert, DType::I64);
    else
      add(f + ".gate.bias", {c.n_routed_experts}, Init::CorrectionBias);
    auto expert = [&](const std::string& q, Role role) {
      linear(q + ".w1.weight", c.moe_intermediate_size, d, role);
      linear(q + ".w2.weight", d, c.moe_intermediate_size, role);
      linear(q + ".w3.weight", c.moe_intermediate_size, d, role);
    };
    for (int64_t e = 0; e < c.n_routed_experts; ++e) expert(f + ".experts." + std::to_string(e), RoutedExpert);
    if (c.n_shared_experts > 0) expert(f + ".shared_experts", Dense);
  }
  return ps;
}

// Block-wise quantization of a [rows, cols] matrix: scale = amax(block) / max_code (rounded up to a power of two
// when `pow2`, for UE8M0 storage), code = nearest(value / scale).
template <typename Encode>
void quantize_blocks(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                     float max_code, bool pow2, Encode encode, std::vector<uint8_t>& codes, std::vector<float>& scales) {
  const int64_t bc = (cols + block_cols - 1) / block_cols;
  scales.assign(static_cast<size_t>(((rows + block_rows - 1) / block_rows) * bc), 0.0f);
  auto scale_at = [&](int64_t r, int64_t k) -> float& {
    return scales[static_cast<size_t>((r / block_rows) * bc + k / block_cols)];
  };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) scale_at(r, k) = std::max(scale_at(r, k), std::fabs(v[static_cast<size_t>(r * cols + k)]));
  for (float& s : scales) {
    s = s > 0 ? s / max_code : 1.0f;
    if (pow2) s = std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(s))));
  }
  codes.resize(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(r * cols + k);
      codes[i] = encode(v[i] / scale_at(r, k));
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
  const auto& shape = p.matrix.empty() ? p.spec.shape : p.matrix;
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
  if (p.storage != Storage::Plain) {
    // A quantized weight and its scales come from the same draw; the writer asks for each separately.
    const Param& w = p.block_scale ? params[index - 1] : p;
    const int64_t rows = p.matrix[0], cols = p.matrix[1];
    const bool fp4 = p.storage == Storage::Fp4;
    const DType scale_dtype = p.block_scale ? p.spec.dtype : params[index + 1].spec.dtype;
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    if (fp4)
      quantize_blocks(draw_values(w, seed), rows, cols, 1, kFp4Block, 6.0f, true, f32_to_fp4_e2m1, codes, scales);
    else
      quantize_blocks(draw_values(w, seed), rows, cols, kFp8Block, kFp8Block, 448.0f, scale_dtype == DType::F8_E8M0,
                      f32_to_fp8_e4m3, codes, scales);
    if (!p.block_scale) {
      if (!fp4) return copy_bytes(codes, bytes);
      std::vector<uint8_t> packed(codes.size() / 2);  // low nibble = even column
      for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
      return copy_bytes(packed, bytes);
    }
    if (scale_dtype == DType::F32) return copy_bytes(scales, bytes);
    std::vector<uint8_t> exponents(scales.size());  // UE8M0: 2^(e - 127)
    for (size_t i = 0; i < scales.size(); ++i) exponents[i] = static_cast<uint8_t>(std::ilogb(scales[i]) + 127);
    return copy_bytes(exponents, bytes);
  }
  const std::vector<float> v = draw_values(p, seed);
  if (p.spec.dtype != DType::BF16) return copy_bytes(v, bytes);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  copy_bytes(h, bytes);
}

}  // namespace

void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype) {
  if (matrix_dtype != DType::F32 && matrix_dtype != DType::BF16 && matrix_dtype != DType::F8_E4M3 &&
      matrix_dtype != DType::F4_E2M1X2)
    fail("model init: matrices must be F32, BF16, F8_E4M3 or F4_E2M1X2, got ", dtype_name(matrix_dtype));
  ModelConfig cfg = config;
  if (matrix_dtype == DType::F8_E4M3) cfg.quantization = QuantConfig{};
  if (matrix_dtype == DType::F4_E2M1X2) {
    if (cfg.hidden_size % kFp4Block != 0 || cfg.moe_intermediate_size % kFp4Block != 0)
      fail("model init: FP4 experts need hidden_size and moe_intermediate_size divisible by ", kFp4Block);
    cfg.quantization = QuantConfig{};
    cfg.quantization->scale_fmt = "ue8m0";
    cfg.expert_dtype = "fp4";
  }
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
