// Quantized checkpoints — FP8 (e4m3, 128×128 block scales) and the official V4 layout (MXFP4 routed experts with
// UE8M0 1×32 scales, e4m3 elsewhere): the loader dequantizes exactly, so a quantized checkpoint and its fp32
// dequantization give bit-identical logits; single codes decode to the values worked out by hand from the formats'
// definitions; malformed scales are named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <utility>

#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "model/deepseek_v4/weights.h"
#include "test_util.h"

namespace strata {
namespace {

// The three formats from their definitions, written here apart from src/core (fp8_e4m3_table, fp4_e2m1_to_f32,
// e8m0_to_f32) so that comparing the loader with them does not compare the loader with itself. The hand-worked
// values in the tests below pin these down.
// OCP FP8 E4M3 ("fn"): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
float e4m3_by_definition(uint8_t v) {
  const int sign = v >> 7, exponent = (v >> 3) & 0xf, mantissa = v & 7;
  if (exponent == 15 && mantissa == 7) return NAN;
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)  // m/8 · 2^-6
                                        : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);  // (1+m/8)·2^(e-7)
  return sign ? -magnitude : magnitude;
}
// OCP MX FP4 E2M1: 1 sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal (m · 0.5).
float e2m1_by_definition(uint8_t nibble) {
  const int sign = (nibble >> 3) & 1, exponent = (nibble >> 1) & 3, mantissa = nibble & 1;
  const float magnitude = exponent == 0 ? 0.5f * static_cast<float>(mantissa)
                                        : std::ldexp(static_cast<float>(2 + mantissa), exponent - 2);  // (1+m/2)·2^(e-1)
  return sign ? -magnitude : magnitude;
}
// UE8M0: 2^(v − 127), 0xff is NaN.
float ue8m0_by_definition(uint8_t v) { return v == 0xff ? NAN : std::ldexp(1.0f, static_cast<int>(v) - 127); }

std::vector<float> scale_values(const model::TensorView& t) {
  if (t.dtype == DType::F32) return test::floats_of(t);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = ue8m0_by_definition(t.data[i]);
  return v;
}

// Rewrites `src` (a quantized checkpoint) as fp32 with the decoders above, not the loader's: FP8 codes × their
// 128×128 block scale, packed FP4 pairs (low nibble first) × their 1×32 block scale, BF16 widened, the rest copied.
void write_dequantized(const std::string& src, const std::string& dst) {
  std::filesystem::create_directories(dst);
  model::ModelConfig cfg = model::load_config(src);
  cfg.quantization.reset();
  std::ofstream(dst + "/config.json") << model::config_to_json(cfg).dump(2);
  const auto store = model::TensorStore::open(src);
  std::vector<model::OwnedTensor> out;
  for (const auto& [name, t] : store.tensors()) {
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0 && name.find("hc_") == std::string::npos)
      continue;
    model::OwnedTensor o{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    const int64_t rows = t.shape[0], stored_cols = t.shape.size() > 1 ? t.shape[1] : 1;
    if (t.dtype == DType::F8_E4M3 || t.dtype == DType::I8) {
      const bool fp4 = t.dtype == DType::I8;
      const int64_t cols = fp4 ? stored_cols * 2 : stored_cols, block_rows = fp4 ? 1 : 128, block_cols = fp4 ? 32 : 128;
      const std::vector<float> scales = scale_values(*store.find(name.substr(0, name.size() - 7) + ".scale"));
      const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
      std::vector<float> v(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t code = fp4 ? static_cast<uint8_t>((t.data[r * stored_cols + c / 2] >> (c % 2 ? 4 : 0)) & 0xf)
                                   : t.data[r * cols + c];
          const float value = fp4 ? e2m1_by_definition(code) : e4m3_by_definition(code);
          v[static_cast<size_t>(r * cols + c)] = value * scales[static_cast<size_t>(r / block_rows * scale_cols + c / block_cols)];
        }
      o = model::make_f32_tensor(name, {rows, cols}, v);
    } else if (t.dtype == DType::BF16) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + i * 2, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;  // bf16 is the top half of an fp32
        std::memcpy(&v[i], &bits, 4);
      }
      o = model::make_f32_tensor(name, t.shape, v);
    }
    out.push_back(std::move(o));
  }
  model::write_safetensors(dst + "/model.safetensors", out);
}

void expect_exact_dequantization(DType format, const std::string& tag) {
  const std::string dir = test::temp_dir(tag);
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir + "/q", 5, format);
  write_dequantized(dir + "/q", dir + "/f32");
  const auto quantized = model::v4::load_model(dir + "/q");
  const auto f32 = model::v4::load_model(dir + "/f32");
  std::vector<int32_t> prompt(140);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 31 + 7) % 512);
  auto s1 = quantized.new_sequence(), s2 = f32.new_sequence();
  const Mat a = quantized.forward(prompt, s1, true), b = f32.forward(prompt, s2, true);
  ASSERT_EQ(a.v.size(), b.v.size());
  EXPECT_EQ(0, std::memcmp(a.v.data(), b.v.data(), a.v.size() * 4));
}

TEST(Quantized, Fp8BlockScaledWeightsLoadExactly) { expect_exact_dequantization(DType::F8_E4M3, "fp8"); }
TEST(Quantized, Fp4ExpertsWithUe8m0ScalesLoadExactly) { expect_exact_dequantization(DType::F4_E2M1X2, "fp4"); }

TEST(Quantized, Fp4NibbleOrderIsLowFirst) {
  // Byte 0x2f packs column 0 = code 0xf (−6) in the low nibble and column 1 = code 0x2 (1.0) in the high one.
  const uint8_t packed[2] = {0x2f, 0x00};
  const float scale = 0.5f;
  const WeightRef w{DType::F4_E2M1X2, packed, 1, 4, &scale, 1, 32};
  float row[4];
  w.row_f32(0, row);
  EXPECT_EQ(row[0], -3.0f);
  EXPECT_EQ(row[1], 0.5f);
  EXPECT_EQ(w.at(0, 0), -3.0f);
  EXPECT_EQ(w.at(0, 1), 0.5f);
}

// Hand-worked codes. E4M3 value = (−1)^s · (1 + m/8) · 2^(e−7), subnormal (e = 0): (−1)^s · m/8 · 2^−6.
struct Code {
  uint8_t code;
  float value;
};
constexpr Code kE4m3[] = {
    {0x38, 1.0f},          // 0 0111 000: 2^0
    {0x40, 2.0f},          // 0 1000 000: 2^1
    {0x3c, 1.5f},          // 0 0111 100: 1.5 · 2^0
    {0xb4, -0.75f},        // 1 0110 100: −1.5 · 2^−1
    {0x53, 11.0f},         // 0 1010 011: 1.375 · 2^3
    {0x7e, 448.0f},        // 0 1111 110: 1.75 · 2^8, the largest finite
    {0xfe, -448.0f},       // its negative
    {0x08, 0.015625f},     // 0 0001 000: 2^−6, the smallest normal
    {0x01, 0.001953125f},  // 0 0000 001: 1/8 · 2^−6 = 2^−9, the smallest subnormal
    {0x07, 0.013671875f},  // 0 0000 111: 7/8 · 2^−6
    {0x00, 0.0f},
};
// E2M1 value = (−1)^s · (1 + m/2) · 2^(e−1), subnormal (e = 0): (−1)^s · m/2. All sixteen codes.
constexpr float kE2m1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

TEST(Quantized, E4m3CodesDecodeToTheirHandWorkedValues) {
  for (const Code& k : kE4m3) {
    EXPECT_EQ(e4m3_by_definition(k.code), k.value) << std::hex << int{k.code};
    EXPECT_EQ(fp8_e4m3_to_f32(k.code), k.value) << std::hex << int{k.code};
  }
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));  // −0
  EXPECT_EQ(fp8_e4m3_to_f32(0x80), 0.0f);
  for (const uint8_t nan : {uint8_t{0x7f}, uint8_t{0xff}}) {  // "fn": S.1111.111 is NaN, there is no infinity
    EXPECT_TRUE(std::isnan(e4m3_by_definition(nan)));
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(nan)));
  }
  // Every code: the library's table equals the definition (NaN where the definition says NaN).
  for (int v = 0; v < 256; ++v) {
    const float want = e4m3_by_definition(static_cast<uint8_t>(v)), got = fp8_e4m3_to_f32(static_cast<uint8_t>(v));
    EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : std::memcmp(&want, &got, 4) == 0) << v;
  }
}

TEST(Quantized, E2m1AndUe8m0CodesDecodeToTheirHandWorkedValues) {
  for (uint8_t n = 0; n < 16; ++n) {
    EXPECT_EQ(e2m1_by_definition(n), kE2m1[n]) << int{n};
    EXPECT_EQ(fp4_e2m1_to_f32(n), kE2m1[n]) << int{n};
  }
  EXPECT_TRUE(std::signbit(fp4_e2m1_to_f32(8)));  // −0
  // UE8M0 = 2^(v − 127).
  const std::pair<uint8_t, float> scales[] = {{127, 1.0f}, {128, 2.0f}, {126, 0.5f}, {130, 8.0f}, {117, 1.0f / 1024}};
  for (const auto& [code, value] : scales) {
    EXPECT_EQ(ue8m0_by_definition(code), value) << int{code};
    EXPECT_EQ(e8m0_to_f32(code), value) << int{code};
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
}

TEST(Quantized, BlockScaledRowsDecodeToHandWorkedValues) {
  // FP8, 2×4 with 1×2 blocks of F32 scales: row 0 = {1, 1.5 | −0.75, 448} × {0.25 | 3},
  // row 1 = {2^−9, 11 | 0, 2} × {−2 | 0.5}.
  const uint8_t fp8[8] = {0x38, 0x3c, 0xb4, 0x7e, 0x01, 0x53, 0x00, 0x40};
  const float fp8_scales[4] = {0.25f, 3.0f, -2.0f, 0.5f};
  const WeightRef w8{DType::F8_E4M3, fp8, 2, 4, fp8_scales, 1, 2};
  const float want8[8] = {0.25f, 0.375f, -2.25f, 1344.0f, -0.00390625f, -22.0f, 0.0f, 1.0f};
  // MXFP4, 1×64 in one row of 1×32 blocks (UE8M0 8 and 0.5, as the loader hands them: floats): columns 0..7 from
  // bytes 0x21 0x53 0xa7 0xfe (low nibble first) = {0.5, 1, 1.5, 3, 6, −1, −4, −6} × 8, columns 32, 33 from
  // byte 0x9c = {−2, −0.5} × 0.5; the rest zero.
  uint8_t fp4[32] = {0x21, 0x53, 0xa7, 0xfe};
  fp4[16] = 0x9c;
  const float fp4_scales[2] = {ue8m0_by_definition(130), ue8m0_by_definition(126)};
  const WeightRef w4{DType::F4_E2M1X2, fp4, 1, 64, fp4_scales, 1, 32};
  const float want4[10] = {4.0f, 8.0f, 12.0f, 24.0f, 48.0f, -8.0f, -32.0f, -48.0f, -1.0f, -0.25f};
  float row[64];
  for (int64_t r = 0; r < 2; ++r) {
    w8.row_f32(r, row);
    for (int64_t c = 0; c < 4; ++c) {
      EXPECT_EQ(row[c], want8[r * 4 + c]) << "fp8 row " << r << " col " << c;
      EXPECT_EQ(w8.at(r, c), want8[r * 4 + c]) << "fp8 row " << r << " col " << c;
    }
  }
  w4.row_f32(0, row);
  for (int64_t c = 0; c < 64; ++c) {
    const float want = c < 8 ? want4[c] : c == 32 ? want4[8] : c == 33 ? want4[9] : 0.0f;
    EXPECT_EQ(row[c], want) << "fp4 col " << c;
    EXPECT_EQ(w4.at(0, c), want) << "fp4 col " << c;
  }
}

// A copy of checkpoint `src` in `dst` with `edit` applied to each tensor (by name) before it is written.
void rewrite_checkpoint(const std::string& src, const std::string& dst,
                        const std::function<void(model::OwnedTensor&)>& edit) {
  const auto store = model::TensorStore::open(src);
  std::vector<model::OwnedTensor> out;
  for (const auto& [name, t] : store.tensors()) {
    model::OwnedTensor o{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    edit(o);
    out.push_back(std::move(o));
  }
  std::filesystem::create_directories(dst);
  model::write_safetensors(dst + "/model.safetensors", out);
  std::filesystem::copy_file(src + "/config.json", dst + "/config.json", std::filesystem::copy_options::overwrite_existing);
}

model::v4::ModelWeights load_weights_of(const std::string& dir) {
  return model::v4::load_weights(model::load_config(dir),
                                 std::make_shared<model::TensorStore>(model::TensorStore::open(dir)));
}

// Through the loader: hand-chosen codes and scales written into real checkpoints come out as hand-worked values —
// e4m3 with an F32 scale (the FP8 layout) and with a UE8M0 scale (the official V4 layout), MXFP4 with UE8M0 scales
// and with F32 scales.
TEST(Quantized, LoaderDecodesHandWrittenCodesAndScales) {
  const std::string dir = test::temp_dir("quant_hand");
  const uint8_t fp8_codes[8] = {0x38, 0x3c, 0xb4, 0x7e, 0x01, 0x08, 0x53, 0x80};
  // × 0.25: {1, 1.5, −0.75, 448, 2^−9, 2^−6, 11, −0} / 4.
  const float fp8_want[8] = {0.25f, 0.375f, -0.1875f, 112.0f, 0.00048828125f, 0.00390625f, 2.75f, -0.0f};
  auto put_fp8 = [&](model::OwnedTensor& t) {
    if (t.name == "layers.0.attn.wq_a.weight") std::memcpy(t.bytes.data(), fp8_codes, 8);
    if (t.name == "layers.0.attn.wq_a.scale") {
      if (t.dtype == DType::F32) {
        const float quarter = 0.25f;
        std::memcpy(t.bytes.data(), &quarter, 4);
      } else {
        t.bytes[0] = 125;  // UE8M0 2^−2
      }
    }
  };
  const uint8_t fp4_bytes[4] = {0x21, 0x53, 0xa7, 0xfe};  // {0.5, 1, 1.5, 3, 6, −1, −4, −6}
  const float fp4_values[8] = {0.5f, 1.0f, 1.5f, 3.0f, 6.0f, -1.0f, -4.0f, -6.0f};
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir + "/fp8", 5, DType::F8_E4M3);
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir + "/fp4", 5, DType::F4_E2M1X2);
  rewrite_checkpoint(dir + "/fp8", dir + "/fp8_hand", put_fp8);
  for (const bool f32_expert_scales : {false, true}) {
    const std::string out = dir + (f32_expert_scales ? "/fp4_hand_f32" : "/fp4_hand_ue8m0");
    rewrite_checkpoint(dir + "/fp4", out, [&](model::OwnedTensor& t) {
      put_fp8(t);
      if (t.name == "layers.0.ffn.experts.0.w1.weight") {
        ASSERT_EQ(t.dtype, DType::I8);
        std::memcpy(t.bytes.data(), fp4_bytes, 4);
      }
      if (t.name == "layers.0.ffn.experts.0.w1.scale") {
        ASSERT_EQ(t.dtype, DType::F8_E8M0);
        ASSERT_GE(t.shape[1], 2);
        if (!f32_expert_scales) {
          t.bytes[0] = 130;  // 2^3 for columns 0..31 of row 0
          return;
        }
        // The same tensor as F32: every scale 1, row 0's first block 3 (not a power of two).
        std::vector<float> ones(t.bytes.size(), 1.0f);
        ones[0] = 3.0f;
        t = model::make_f32_tensor(t.name, t.shape, ones);
      }
    });
    const model::v4::ModelWeights w = load_weights_of(out);
    const WeightRef& w1 = w.layers[0].ffn.experts[0].w1;
    ASSERT_EQ(w1.dtype, DType::F4_E2M1X2);
    const float scale = f32_expert_scales ? 3.0f : 8.0f;
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(w1.at(0, c), fp4_values[c] * scale) << out << " col " << c;
    std::vector<float> row(static_cast<size_t>(w1.cols));
    w1.row_f32(0, row.data());
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(row[static_cast<size_t>(c)], fp4_values[c] * scale) << out << " col " << c;
    const WeightRef& wq_a = w.layers[0].attn.wq_a;  // e4m3 with a UE8M0 scale in this layout
    ASSERT_EQ(wq_a.dtype, DType::F8_E4M3);
    for (int64_t c = 0; c < 8; ++c) EXPECT_EQ(wq_a.at(0, c), fp8_want[c]) << out << " col " << c;
  }
  const model::v4::ModelWeights w = load_weights_of(dir + "/fp8_hand");
  const WeightRef& wq_a = w.layers[0].attn.wq_a;  // e4m3 with an F32 scale
  ASSERT_EQ(wq_a.dtype, DType::F8_E4M3);
  std::vector<float> row(static_cast<size_t>(wq_a.cols));
  wq_a.row_f32(0, row.data());
  for (int64_t c = 0; c < 8; ++c) {
    EXPECT_EQ(row[static_cast<size_t>(c)], fp8_want[c]) << "col " << c;
    EXPECT_EQ(std::signbit(row[static_cast<size_t>(c)]), std::signbit(fp8_want[c])) << "col " << c;
  }
}

TEST(Quantized, MissingOrMisshapedScalesAreNamed) {
  const std::string dir = test::temp_dir("fp8_bad");
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir, 5, DType::F8_E4M3);
  const auto store = model::TensorStore::open(dir);
  const std::string victim = "layers.0.attn.wq_a.scale";
  for (bool drop : {true, false}) {
    std::vector<model::OwnedTensor> out;
    for (const auto& [name, t] : store.tensors()) {
      model::OwnedTensor o{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
      if (name == victim) {
        if (drop) continue;
        o = model::make_f32_tensor(name, {7}, std::vector<float>(7, 1.0f));
      }
      out.push_back(std::move(o));
    }
    model::write_safetensors(dir + "/broken.safetensors", out);
    std::filesystem::create_directories(dir + "/broken");
    std::filesystem::rename(dir + "/broken.safetensors", dir + "/broken/model.safetensors");
    std::filesystem::copy_file(dir + "/config.json", dir + "/broken/config.json",
                               std::filesystem::copy_options::overwrite_existing);
    try {
      model::v4::load_model(dir + "/broken");
      FAIL() << "expected an error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(drop ? "layers.0.attn.wq_a" : victim), std::string::npos) << msg;
      EXPECT_NE(msg.find(drop ? "block-scale" : "expected shape"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace strata
