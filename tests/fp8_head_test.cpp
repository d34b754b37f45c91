// An FP8 vocabulary head on the CPU (the demo model's layout: an F8_E4M3 tied embedding with fp32 block scales and
// no head.weight). The CPU model dequantizes the head once at load (dequantize_head) instead of row by row on every
// step; the logits must stay bit-identical to the row-by-row dequantization.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ops.h"
#include "model/deepseek_v4/forward.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"

namespace strata {
namespace {

using model::v4::ModelWeights;

constexpr int64_t kBlock = 32;  // smaller than tiny's hidden 64, so a head row spans two scale blocks

// A random tiny checkpoint rewritten into the demo model's head layout: embed.weight as F8_E4M3 codes with one
// fp32 scale per kBlock × kBlock block (amax / 448, so every block uses the whole code range), embed.scale,
// tie_word_embeddings and no head.weight.
std::string write_fp8_tied_checkpoint(const std::string& tag) {
  const std::string dir = test::temp_dir(tag), f32_dir = dir + "/f32";
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), f32_dir, 11, DType::F32);
  model::ModelConfig cfg = model::load_config(f32_dir);
  cfg.tie_word_embeddings = true;
  model::QuantConfig quant;
  quant.weight_block_size = {kBlock, kBlock};
  cfg.quantization = quant;
  std::ofstream(dir + "/config.json") << model::config_to_json(cfg).dump(2);

  const auto store = model::TensorStore::open(f32_dir);
  std::vector<model::OwnedTensor> out;
  for (const auto& [name, t] : store.tensors()) {
    if (name == "head.weight") continue;
    if (name != "embed.weight") {
      out.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const std::vector<float> values = test::floats_of(t);
    const int64_t block_rows = (rows + kBlock - 1) / kBlock, block_cols = (cols + kBlock - 1) / kBlock;
    std::vector<float> scales(static_cast<size_t>(block_rows * block_cols));
    std::vector<uint8_t> codes(values.size());
    for (int64_t br = 0; br < block_rows; ++br)
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        float amax = 0;
        for (int64_t r = br * kBlock; r < std::min(rows, (br + 1) * kBlock); ++r)
          for (int64_t c = bc * kBlock; c < std::min(cols, (bc + 1) * kBlock); ++c)
            amax = std::max(amax, std::fabs(values[static_cast<size_t>(r * cols + c)]));
        const float scale = amax > 0 ? amax / 448.0f : 1.0f;
        scales[static_cast<size_t>(br * block_cols + bc)] = scale;
        for (int64_t r = br * kBlock; r < std::min(rows, (br + 1) * kBlock); ++r)
          for (int64_t c = bc * kBlock; c < std::min(cols, (bc + 1) * kBlock); ++c)
            codes[static_cast<size_t>(r * cols + c)] = f32_to_fp8_e4m3(values[static_cast<size_t>(r * cols + c)] / scale);
      }
    out.push_back({name, DType::F8_E4M3, t.shape, std::move(codes)});
    out.push_back(model::make_f32_tensor("embed.scale", {block_rows, block_cols}, scales));
  }
  model::write_safetensors(dir + "/model.safetensors", out);
  return dir;
}

ModelWeights load_weights_of(const std::string& dir) {
  return model::v4::load_weights(model::load_config(dir), std::make_shared<model::TensorStore>(model::TensorStore::open(dir)));
}

std::vector<int32_t> prompt_of(int64_t n, int64_t vocab) {
  std::vector<int32_t> prompt(static_cast<size_t>(n));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 5) % vocab);
  return prompt;
}

void expect_same_bits(const Mat& a, const Mat& b, const std::string& what) {
  ASSERT_EQ(a.rows, b.rows) << what;
  ASSERT_EQ(a.cols, b.cols) << what;
  EXPECT_TRUE(test::same_finite_bits(a.v.data(), b.v.data(), a.v.size())) << what << ": logits differ";
}

TEST(Fp8Head, DequantizedOnceHoldsTheRowByRowValues) {
  ModelWeights w = load_weights_of(write_fp8_tied_checkpoint("fp8head_values"));
  ASSERT_EQ(w.head.dtype, DType::F8_E4M3);
  ASSERT_EQ(w.head.data, w.embed.data);  // tied: one stored table
  const WeightRef stored = w.head;
  model::v4::dequantize_head(w);
  EXPECT_EQ(w.head.dtype, DType::F32);
  EXPECT_EQ(w.embed.dtype, DType::F8_E4M3);  // lookups keep reading the stored codes
  ASSERT_TRUE(w.head_f32);
  std::vector<float> expected(static_cast<size_t>(stored.cols)), got(expected.size());
  for (int64_t r = 0; r < stored.rows; ++r) {
    stored.row_f32(r, expected.data());
    w.head.row_f32(r, got.data());
    ASSERT_TRUE(test::same_finite_bits(expected.data(), got.data(), got.size())) << "head row " << r;
  }
}

TEST(Fp8Head, UnquantizedHeadIsLeftAsStored) {
  const std::string dir = test::temp_dir("fp8head_bf16");
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir, 3, DType::BF16);
  ModelWeights w = load_weights_of(dir);
  const WeightRef before = w.head;
  model::v4::dequantize_head(w);
  EXPECT_EQ(w.head.dtype, before.dtype);
  EXPECT_EQ(w.head.data, before.data);
  EXPECT_FALSE(w.head_f32);
}

// The CPU model (head dequantized at load) against forward.h run on the loaded weights as stored (the head
// dequantized row by row inside every linear): prefill of 140 tokens with every position's logits, then decode.
TEST(Fp8Head, CpuModelLogitsAreBitIdenticalToRowByRowDequantization) {
  const std::string dir = write_fp8_tied_checkpoint("fp8head_model");
  const model::v4::Model model = model::v4::load_model(dir);
  const model::ModelConfig& cfg = model.config();
  const ModelWeights stored = load_weights_of(dir);
  ASSERT_EQ(stored.head.dtype, DType::F8_E4M3);
  const model::v4::RopeTable rope_main = model::v4::make_rope_table(cfg.rope_main, cfg.head_dim);
  const model::v4::RopeTable rope_compress = model::v4::make_rope_table(cfg.rope_compress, cfg.head_dim);
  auto row_by_row = [&](const std::vector<int32_t>& tokens, model::SequenceState& state, bool all_logits) {
    std::vector<model::SequenceChunk> chunks(1);
    chunks[0].tokens = tokens;
    chunks[0].state = &state;
    chunks[0].all_logits = all_logits;
    cpu::CpuBackend backend;
    const int64_t rows = all_logits ? static_cast<int64_t>(tokens.size()) : 1;
    return model::v4::Forward<cpu::CpuBackend>(cfg, stored, rope_main, rope_compress, backend)
        .run(chunks, model::v4::all_rows_home(rows), {})
        .raw;
  };

  auto fast_state = model.new_sequence(), reference_state = model.new_sequence();
  const std::vector<int32_t> prompt = prompt_of(140, cfg.vocab_size);
  expect_same_bits(model.forward(prompt, fast_state, true), row_by_row(prompt, reference_state, true), "prefill");
  for (int32_t token : {7, 300, 511, 0}) {
    const std::vector<int32_t> next = {token};
    expect_same_bits(model.forward(next, fast_state, false), row_by_row(next, reference_state, false),
                     "decode of token " + std::to_string(token));
  }
}

// cpu::linear reads an aligned fp32 matrix in place and copies any other row by row; both give the same bits as
// the FP8 matrix it was dequantized from, including rows and columns that end inside a scale block.
TEST(Fp8Head, LinearInPlaceAndCopiedFp32MatchFp8) {
  const int64_t rows = 70, cols = 48;
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 131 + 17) % 256) & 0xf7;  // no NaN
  const int64_t block_rows = (rows + kBlock - 1) / kBlock, block_cols = (cols + kBlock - 1) / kBlock;
  std::vector<float> scales(static_cast<size_t>(block_rows * block_cols));
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.013f * static_cast<float>(i + 1);
  WeightRef fp8{DType::F8_E4M3, codes.data(), rows, cols, scales.data(), kBlock, kBlock};

  std::vector<float> dequantized(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) fp8.row_f32(r, dequantized.data() + r * cols);
  const WeightRef in_place{DType::F32, reinterpret_cast<const uint8_t*>(dequantized.data()), rows, cols};
  // The same floats one byte off alignment: linear must copy them (as row_f32 does) rather than read misaligned.
  std::vector<uint8_t> shifted(dequantized.size() * sizeof(float) + 1);
  std::memcpy(shifted.data() + 1, dequantized.data(), dequantized.size() * sizeof(float));
  const WeightRef misaligned{DType::F32, shifted.data() + 1, rows, cols};

  Mat x(3, cols);
  for (size_t i = 0; i < x.v.size(); ++i) x.v[i] = std::sin(0.37f * static_cast<float>(i));
  const Mat expected = cpu::linear(x, fp8);
  expect_same_bits(cpu::linear(x, in_place), expected, "in place");
  expect_same_bits(cpu::linear(x, misaligned), expected, "misaligned copy");
}

}  // namespace
}  // namespace strata
