// Quantized checkpoints — FP8 (e4m3, 128×128 block scales) and the official V4 layout (MXFP4 routed experts with
// UE8M0 1×32 scales, e4m3 elsewhere): the loader dequantizes exactly, so a quantized checkpoint and its fp32
// dequantization give bit-identical logits; malformed scales are named errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"

namespace strata {
namespace {

std::vector<float> scale_values(const model::TensorView& t) {
  if (t.dtype == DType::F32) return test::floats_of(t);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = e8m0_to_f32(t.data[i]);  // UE8M0
  return v;
}

// Rewrites `src` (a quantized checkpoint) as fp32, independently of the loader: FP8 / packed FP4 weights × their
// block scales, BF16 widened, everything else copied.
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
    const bool fp4 = t.dtype == DType::I8;
    if (t.dtype == DType::F8_E4M3 || t.dtype == DType::BF16 || fp4) {
      WeightRef w{t.dtype, t.data, t.shape[0], t.shape.size() > 1 ? t.shape[1] : 1};
      std::vector<float> scales;
      if (t.dtype == DType::F8_E4M3 || fp4) {
        scales = scale_values(*store.find(name.substr(0, name.size() - 7) + ".scale"));
        w.block_scales = scales.data();
      }
      if (fp4) {
        w.dtype = DType::F4_E2M1X2;
        w.cols *= 2;
        w.block_rows = 1;
        w.block_cols = 32;
      }
      std::vector<float> v(static_cast<size_t>(w.rows * w.cols));
      for (int64_t r = 0; r < w.rows; ++r) w.row_f32(r, v.data() + r * w.cols);
      o = model::make_f32_tensor(name, {w.rows, w.cols}, v);
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
