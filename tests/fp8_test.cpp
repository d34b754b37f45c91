// FP8 (e4m3, 128×128 block scales, DeepSeek's layout) checkpoints: the loader dequantizes exactly, so an FP8
// checkpoint and its fp32 dequantization give bit-identical logits; malformed scales are named errors.
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"

namespace strata {
namespace {

// Rewrites `src` (an FP8 checkpoint) as fp32: FP8 weights × their block scales, BF16 widened, the rest copied.
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
    if (t.dtype == DType::F8_E4M3 || t.dtype == DType::BF16) {
      WeightRef w{t.dtype, t.data, t.shape[0], t.shape.size() > 1 ? t.shape[1] : 1};
      std::vector<float> scales;
      if (t.dtype == DType::F8_E4M3) {
        const std::string scale_name = name.substr(0, name.size() - 7) + ".scale";
        scales = test::floats_of(*store.find(scale_name));
        w.block_scales = scales.data();
      }
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (int64_t r = 0; r < w.rows; ++r) w.row_f32(r, v.data() + r * w.cols);
      o = model::make_f32_tensor(name, t.shape, v);
    }
    out.push_back(std::move(o));
  }
  model::write_safetensors(dst + "/model.safetensors", out);
}

TEST(Fp8, LoadsBlockScaledWeightsExactly) {
  const std::string dir = test::temp_dir("fp8");
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir + "/fp8", 5, DType::F8_E4M3);
  write_dequantized(dir + "/fp8", dir + "/f32");
  const auto fp8 = model::v4::load_model(dir + "/fp8");
  const auto f32 = model::v4::load_model(dir + "/f32");
  std::vector<int32_t> prompt(140);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 31 + 7) % 512);
  auto s1 = fp8.new_sequence(), s2 = f32.new_sequence();
  const Mat a = fp8.forward(prompt, s1, true), b = f32.forward(prompt, s2, true);
  ASSERT_EQ(a.v.size(), b.v.size());
  EXPECT_EQ(0, std::memcmp(a.v.data(), b.v.data(), a.v.size() * 4));
}

TEST(Fp8, MissingOrMisshapedScalesAreNamed) {
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
