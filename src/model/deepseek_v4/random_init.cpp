#include "model/deepseek_v4/random_init.h"

#include <sys/mman.h>

#include <array>
#include <cerrno>
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
  // layout): the router is bf16 too, routed experts are MXFP4 and the other matrices e4m3, all scales UE8M0 (powers
  // of two).
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
  // One layer's tensors under `p` ("layers.<l>" or "mtp.<i>").
  auto layer = [&](const std::string& p, AttentionType t, MlpType mlp, int64_t rate) {
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
    auto compressor = [&](const std::string& q, int64_t dim, bool overlap) {
      const int64_t width = overlap ? 2 * dim : dim;
      linear(q + ".wkv.weight", width, d, KeepBf16);
      linear(q + ".wgate.weight", width, d, KeepBf16);
      add(q + ".ape", {rate, width}, Init::PositionBias);
      add(q + ".norm.weight", {dim}, Init::Norm);
    };
    if (t != AttentionType::Sliding) compressor(a + ".compressor", hd, t == AttentionType::CompressedSparse);
    if (t == AttentionType::CompressedSparse) {
      linear(a + ".indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      linear(a + ".indexer.weights_proj.weight", c.index_n_heads, d, KeepBf16);
      compressor(a + ".indexer.compressor", c.index_head_dim, true);
    }
    const std::string f = p + ".ffn";
    linear(f + ".gate.weight", c.n_routed_experts, d, fp4 ? KeepBf16 : Dense);  // the release's router is bf16
    if (mlp == MlpType::HashMoe)
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
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layer("layers." + std::to_string(l), c.layer_types[static_cast<size_t>(l)],
          c.mlp_layer_types[static_cast<size_t>(l)], c.compress_rate(l));
  // MTP draft layers (docs/mtp.md): DeepSeek's MTPBlock, a sliding-window, top-k MoE layer plus its input
  // projections (e4m3 in the release, like the other dense matrices), norms and HyperHead.
  for (int64_t i = 0; i < c.num_nextn_predict_layers; ++i) {
    const std::string p = "mtp." + std::to_string(i);
    linear(p + ".e_proj.weight", d, d);
    linear(p + ".h_proj.weight", d, d);
    for (const char* norm : {".enorm.weight", ".hnorm.weight", ".norm.weight"}) add(p + norm, {d}, Init::Norm);
    add(p + ".hc_head_fn", {hc, hc * d}, Init::HcFn);
    add(p + ".hc_head_base", {hc}, Init::HcBase);
    add(p + ".hc_head_scale", {1}, Init::HcScale);
    layer(p, AttentionType::Sliding, MlpType::Moe, 0);
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

// --- Random weights in memory (benchmarks) ----------------------------------------------------------------------
// Box-Muller normals and per-block amax quantization (above) cost tens of ns per value: minutes for one V4-Flash
// layer (6.6 G parameters). Here every value is one 16-bit slice of a splitmix64 draw mapped onto a uniform
// distribution with the mean and standard deviation draw_values gives that kind of parameter.

struct Moments {
  double mean, std;
};

// Must follow draw_values: its distribution's mean and standard deviation for each kind.
Moments moments(Init init, double fan_in) {
  switch (init) {
    case Init::Linear:
    case Init::HcFn: return {0.0, 1.0 / std::sqrt(fan_in)};
    case Init::Embedding:
    case Init::Sink: return {0.0, 1.0};
    case Init::Norm: return {1.0, 0.1};
    case Init::PositionBias:
    case Init::HcBase: return {0.0, 0.5};
    case Init::HcScale: return {1.0, 1.0 / std::sqrt(12.0)};  // 0.5 + U[0, 1)
    case Init::CorrectionBias: return {0.0, 0.1};
    case Init::TokenToExpert: break;
  }
  return {0.0, 0.0};
}

// u in [0, 65536) → the midpoint of its 1/65536 slice of [-1, 1).
inline float unit(uint32_t u) { return static_cast<float>((2.0 * static_cast<double>(u) + 1.0) / 65536.0 - 1.0); }

// The e4m3 code nearest 448 · unit(u): codes whose values are uniform on [-448, 448], so code × (half / 448) is
// uniform on [-half, half] with one scale for every block.
const std::array<uint8_t, 65536>& fp8_uniform_codes() {
  static const std::array<uint8_t, 65536> table = [] {
    std::array<uint8_t, 65536> t{};
    for (uint32_t u = 0; u < t.size(); ++u) t[u] = f32_to_fp8_e4m3(448.0f * unit(u));
    return t;
  }();
  return table;
}

// Rows [row0, row0 + rows) of one parameter: what one thread fills at a time.
struct Piece {
  size_t param;
  int64_t row0, rows;
};

constexpr int64_t kPieceValues = 1 << 22;  // small enough to balance threads, large enough to amortize a piece

// The logical [rows, cols] of a parameter: a matrix's own shape (also for quantized storage), vectors one row.
std::array<int64_t, 2> logical_shape(const Param& p) {
  const std::vector<int64_t>& shape = p.matrix.empty() ? p.spec.shape : p.matrix;
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  const int64_t rows = shape.size() == 2 ? shape[0] : 1;
  return {rows, rows > 0 ? n / rows : 0};
}

std::vector<Piece> split_into_pieces(const std::vector<Param>& params) {
  std::vector<Piece> pieces;
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params[i];
    if (p.block_scale) continue;  // filled with its weight
    const auto [rows, cols] = logical_shape(p);
    if (p.init == Init::TokenToExpert) {
      pieces.push_back({i, 0, rows});
      continue;
    }
    int64_t step = std::max<int64_t>(1, kPieceValues / std::max<int64_t>(cols, 1));
    if (p.storage == Storage::Fp8) step = (step + kFp8Block - 1) / kFp8Block * kFp8Block;  // whole scale blocks
    for (int64_t r = 0; r < rows; r += step) pieces.push_back({i, r, std::min(step, rows - r)});
  }
  return pieces;
}

// `at[i]`: where parameter i's bytes go.
void fill_piece(const std::vector<Param>& params, const Piece& piece, const ModelConfig& c, uint64_t seed,
                const std::vector<uint8_t*>& at) {
  const Param& p = params[piece.param];
  if (p.init == Init::TokenToExpert) {
    const std::vector<int64_t> ids = draw_token_to_expert(p, c, seed);
    std::memcpy(at[piece.param], ids.data(), ids.size() * sizeof(int64_t));
    return;
  }
  const auto [rows, cols] = logical_shape(p);
  const std::vector<int64_t>& shape = p.matrix.empty() ? p.spec.shape : p.matrix;  // as draw_values reads fan_in
  const Moments m = moments(p.init, shape.size() == 2 ? static_cast<double>(shape[1]) : 1.0);
  const auto half = static_cast<float>(std::sqrt(3.0) * m.std), mean = static_cast<float>(m.mean);
  // Each piece has its own stream, so the values do not depend on how threads share the pieces.
  Rng rng{name_seed(seed, p.spec.name) ^ (0x632be59bd9b4e019ull * static_cast<uint64_t>(piece.row0 + 1))};
  const int64_t begin = piece.row0 * cols, n = piece.rows * cols;
  auto each = [&](auto&& put) {  // four 16-bit draws per generator step
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const uint64_t r = rng.next();
      for (int j = 0; j < 4; ++j) put(begin + i + j, static_cast<uint32_t>(r >> (16 * j)) & 0xffff);
    }
    if (i == n) return;
    const uint64_t r = rng.next();
    for (int j = 0; i < n; ++i, ++j) put(begin + i, static_cast<uint32_t>(r >> (16 * j)) & 0xffff);
  };
  if (p.storage == Storage::Fp8) {
    const std::array<uint8_t, 65536>& codes = fp8_uniform_codes();
    uint8_t* out = at[piece.param];
    each([&](int64_t i, uint32_t u) { out[i] = codes[u]; });
    auto* scales = reinterpret_cast<float*>(at[piece.param + 1]);
    const int64_t scale_cols = (cols + kFp8Block - 1) / kFp8Block;
    const int64_t b0 = piece.row0 / kFp8Block, b1 = (piece.row0 + piece.rows + kFp8Block - 1) / kFp8Block;
    std::fill(scales + b0 * scale_cols, scales + b1 * scale_cols, half / 448.0f);
    return;
  }
  if (p.spec.dtype == DType::BF16) {
    // A lookup per value is 3× faster than converting; the table costs 65536 conversions, ~2 % of a piece.
    std::vector<uint16_t> table(65536);
    for (uint32_t u = 0; u < table.size(); ++u) table[u] = f32_to_bf16(mean + half * unit(u));
    auto* out = reinterpret_cast<uint16_t*>(at[piece.param]);
    each([&](int64_t i, uint32_t u) { out[i] = table[u]; });
    return;
  }
  auto* out = reinterpret_cast<float*>(at[piece.param]);
  each([&](int64_t i, uint32_t u) { out[i] = mean + half * unit(u); });
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    double kb = 0;
    in >> kb;
    if (key == "MemAvailable:") return kb * 1024.0;
    in.ignore(256, '\n');
  }
  return 0;  // unknown: let the allocation decide
}

// Anonymous memory that the filling threads touch first; huge pages cut the page faults of tens of GB.
std::shared_ptr<uint8_t> anonymous_memory(size_t bytes) {
  void* p = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("random weights: cannot allocate ", bytes, " bytes: ", std::strerror(errno));
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without transparent huge pages it is just slower
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [bytes](uint8_t* q) { munmap(q, std::max<size_t>(bytes, 1)); });
}

}  // namespace

ModelConfig random_checkpoint_config(const ModelConfig& config, DType matrix_dtype) {
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
  return cfg;
}

namespace {

// Every parameter of `params` filled by the fast generator (above) in one block of host memory: `at[i]` is where
// parameter i's bytes are. `what` names the caller in errors.
struct FastValues {
  std::shared_ptr<uint8_t> memory;
  std::vector<uint8_t*> at;
};

FastValues fast_values(const std::vector<Param>& params, const ModelConfig& cfg, uint64_t seed, const char* what) {
  std::vector<size_t> offset(params.size());
  size_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    offset[i] = total;
    total += (params[i].spec.nbytes() + 63) / 64 * 64;  // cache-line aligned, so no two threads share a line
  }
  const double available = available_memory_bytes();
  if (available > 0 && static_cast<double>(total) > 0.95 * available)
    fail(what, ": ", cfg.num_hidden_layers, " layers need ", static_cast<double>(total) / (1 << 30),
         " GiB of host memory; ", available / (1 << 30), " GiB are available (use fewer --layers or --dtype fp8)");
  FastValues v{anonymous_memory(total), std::vector<uint8_t*>(params.size())};
  for (size_t i = 0; i < params.size(); ++i) v.at[i] = v.memory.get() + offset[i];
  const std::vector<Piece> pieces = split_into_pieces(params);
  fp8_uniform_codes();  // built once, before the threads need it
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < pieces.size(); ++i) fill_piece(params, pieces[i], cfg, seed, v.at);
  return v;
}

void check_fast_dtype(DType matrix_dtype, const char* what) {
  if (matrix_dtype != DType::F32 && matrix_dtype != DType::BF16 && matrix_dtype != DType::F8_E4M3)
    fail(what, ": matrices must be F32, BF16 or F8_E4M3, got ", dtype_name(matrix_dtype));
}

}  // namespace

ModelWeights random_weights(const ModelConfig& config, uint64_t seed, DType matrix_dtype) {
  check_fast_dtype(matrix_dtype, "random weights");
  const ModelConfig cfg = random_checkpoint_config(config, matrix_dtype);
  const std::vector<Param> params = model_params(cfg, matrix_dtype);
  const FastValues v = fast_values(params, cfg, seed, "random weights");
  auto store = std::make_shared<TensorStore>();
  for (size_t i = 0; i < params.size(); ++i) {
    const TensorSpec& s = params[i].spec;
    store->add_in_memory({s.name, s.dtype, s.shape, v.at[i], s.nbytes(), "(random weights)"}, v.memory);
  }
  return load_weights(cfg, std::move(store));
}

void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype,
                             RandomFill fill) {
  if (fill == RandomFill::Fast) check_fast_dtype(matrix_dtype, "model init --fill fast");
  const ModelConfig cfg = random_checkpoint_config(config, matrix_dtype);
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir + "/config.json");
    if (!out) fail(dir, "/config.json: cannot open for writing");
    out << config_to_json(cfg).dump(2) << "\n";
  }
  const std::vector<Param> params = model_params(cfg, matrix_dtype);
  std::vector<TensorSpec> specs;
  for (const Param& p : params) specs.push_back(p.spec);
  FastValues fast;
  if (fill == RandomFill::Fast) fast = fast_values(params, cfg, seed, "model init --fill fast");
  write_safetensors_streaming(
      dir + "/model.safetensors", specs,
      [&](size_t i, std::vector<uint8_t>& bytes) {
        if (fill == RandomFill::Exact) return fill_values(params, i, cfg, seed, bytes);
        bytes.assign(fast.at[i], fast.at[i] + params[i].spec.nbytes());
      },
      {{"format", "pt"}, {"producer", "strata model init"}, {"seed", std::to_string(seed)},
       {"fill", fill == RandomFill::Fast ? "fast" : "exact"}});
}

}  // namespace strata::model::v4
