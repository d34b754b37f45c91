// DeepSeek's numerics on the CPU (`--precision official`, backend/cpu/official_numerics.h): each quantization step
// against its definition written here apart from src/, and the whole model against the PyTorch oracle's fixture
// (tests/gpu/official_reference.py, run on the GPU machine: tests/fixtures/official/).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/official_numerics.h"
#include "core/dtype.h"
#include "model/deepseek_v4/fingerprint.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"

namespace strata {
namespace {

using cpu::official::round_e2m1;
using cpu::official::round_e4m3;

// Every finite non-negative e4m3 value, by its definition: 2^(e−7) · (1 + m/8), subnormals 2^-6 · m/8.
std::vector<float> e4m3_values() {
  std::vector<float> v;
  for (int m = 0; m < 8; ++m) v.push_back(std::ldexp(static_cast<float>(m) / 8.0f, -6));
  for (int e = 1; e < 16; ++e)
    for (int m = 0; m < 8; ++m)
      if (!(e == 15 && m == 7)) v.push_back(std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7));
  return v;
}

TEST(OfficialNumerics, E4m3RoundsToNearestWithTiesToTheEvenCode) {
  const std::vector<float> v = e4m3_values();
  ASSERT_EQ(v.back(), 448.0f);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(round_e4m3(v[i]), v[i]);
    EXPECT_EQ(round_e4m3(-v[i]), -v[i]);
    if (i + 1 == v.size()) continue;
    const float mid = 0.5f * (v[i] + v[i + 1]);
    EXPECT_EQ(round_e4m3(mid), (i % 2 == 0) ? v[i] : v[i + 1]) << "tie between " << v[i] << " and " << v[i + 1];
    EXPECT_EQ(round_e4m3(std::nextafter(mid, 0.0f)), v[i]);
    EXPECT_EQ(round_e4m3(std::nextafter(mid, 1e9f)), v[i + 1]);
  }
  EXPECT_EQ(round_e4m3(1000.0f), 448.0f);
  EXPECT_EQ(round_e4m3(-465.0f), -448.0f);
  EXPECT_EQ(round_e4m3(std::ldexp(1.0f, -11)), 0.0f);  // below half the smallest subnormal (2^-9)
}

TEST(OfficialNumerics, E2m1RoundsToNearestWithTiesToTheEvenCode) {
  const float values[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (float x : values) EXPECT_EQ(round_e2m1(x), x);
  // Midpoints: the even code of each pair (codes 0, 2, 4, 6 are 0, 1, 2, 4).
  const std::pair<float, float> ties[] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
                                          {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f}};
  for (auto [x, want] : ties) {
    EXPECT_EQ(round_e2m1(x), want) << x;
    EXPECT_EQ(round_e2m1(-x), -want) << -x;
  }
  EXPECT_EQ(round_e2m1(5.01f), 6.0f);
  EXPECT_EQ(round_e2m1(9.0f), 6.0f);
}

TEST(OfficialNumerics, Pow2CeilIsExact) {
  EXPECT_EQ(cpu::official::pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(cpu::official::pow2_ceil(std::nextafter(1.0f, 2.0f)), 2.0f);
  EXPECT_EQ(cpu::official::pow2_ceil(0.75f), 1.0f);
  EXPECT_EQ(cpu::official::pow2_ceil(std::ldexp(1.0f, -20)), std::ldexp(1.0f, -20));
  EXPECT_EQ(cpu::official::pow2_ceil(3.0f * std::ldexp(1.0f, -30)), std::ldexp(1.0f, -28));
}

TEST(OfficialNumerics, ActivationsQuantizePerBlockWithPowerOfTwoScales) {
  Mat x(2, 200);
  for (int64_t c = 0; c < 200; ++c) {
    x.at(0, c) = std::sin(0.37f * static_cast<float>(c)) * (c < 128 ? 3.0f : 0.01f);
    x.at(1, c) = 1e-6f * static_cast<float>(c % 7);  // under the 1e-4 floor of amax
  }
  const auto q = cpu::official::quantize_activations(x, 128);
  ASSERT_EQ(q.scales.size(), 4u);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 200; ++c) {
      const float s = q.scale(r, c);
      int e = 0;
      EXPECT_EQ(std::frexp(s, &e), 0.5f) << "scale " << s << " is not a power of two";
      const float code = q.codes[static_cast<size_t>(r * 200 + c)];
      EXPECT_EQ(round_e4m3(code), code);
      EXPECT_LE(std::fabs(code), 448.0f);
      // amax / 448 ≤ s < 2 · amax / 448, so a block's largest value lands in [224, 448]
      EXPECT_NEAR(code * s, x.at(r, c), std::fabs(x.at(r, c)) / 8 + s / 512) << r << "," << c;
    }
  EXPECT_EQ(q.scale(1, 0), cpu::official::pow2_ceil(1e-4f * (1.0f / 448.0f)));
}

TEST(OfficialNumerics, Fp4FakeQuantizationKeepsEightMagnitudesPerBlock) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(1.3f * static_cast<float>(i)) * (i < 32 ? 1.0f : 40.0f);
  std::vector<float> y = x;
  cpu::official::fake_fp4(y.data(), 64);
  for (int b = 0; b < 2; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + i)]));
    const float s = cpu::official::pow2_ceil(amax / 6.0f);
    for (int i = 0; i < 32; ++i) {
      const float v = y[static_cast<size_t>(b * 32 + i)];
      EXPECT_EQ(round_e2m1(v / s) * s, v);  // on the block's grid
      EXPECT_LE(std::fabs(v - x[static_cast<size_t>(b * 32 + i)]), s) << i;
    }
  }
}

// The KV step: FP8 in 1×64 blocks and back with the TileLang kernel's rounding; only bf16 with the switch off.
TEST(OfficialNumerics, KvFakeFp8RoundsOnlyWhenSwitchedOn) {
  std::vector<float> x(128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.3f * std::sin(0.71f * static_cast<float>(i)) + 1e-3f;
  std::vector<float> on = x, off = x;
  cpu::official::fake_fp8(on.data(), 128, 64, true);
  cpu::official::fake_fp8(off.data(), 128, 64, false);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(off[i], cpu::official::round_bf16(x[i]));
    float amax = 0;
    for (size_t j = i / 64 * 64; j < i / 64 * 64 + 64; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float s = cpu::official::pow2_ceil(amax * (1.0f / 448.0f));
    EXPECT_EQ(on[i], round_e4m3(x[i] / s) * s) << i;
  }
  EXPECT_NE(on, off);
}

TEST(OfficialNumerics, HadamardIsTheScaledSylvesterTransform) {
  constexpr int64_t n = 64;
  for (int64_t k : {0, 5, 63}) {
    std::vector<float> x(n, 0.0f);
    x[static_cast<size_t>(k)] = 1.0f;
    cpu::official::hadamard_bf16(x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // H[i][k] = (−1)^popcount(i & k)
      const float sign = (__builtin_popcountll(static_cast<unsigned long long>(i & k)) % 2) ? -1.0f : 1.0f;
      EXPECT_EQ(x[static_cast<size_t>(i)], sign * 0.125f) << k << "," << i;
    }
  }
}

TEST(OfficialNumerics, Fp8ProductQuantizesActivationsAndPromotesPerBlock) {
  // A 2 × 256 FP8 weight with 128×128 scales 2^-3 and 2^1; x of two rows.
  constexpr int64_t k = 256;
  std::vector<uint8_t> codes(2 * k);
  for (int64_t i = 0; i < 2 * k; ++i) codes[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + 11) % 126);
  const float scales[2] = {0.125f, 2.0f};
  const WeightRef w{DType::F8_E4M3, codes.data(), 2, k, scales, 128, 128};
  Mat x(2, k);
  for (int64_t c = 0; c < k; ++c) {
    x.at(0, c) = cpu::official::round_bf16(std::sin(0.1f * static_cast<float>(c)));
    x.at(1, c) = cpu::official::round_bf16(0.001f * static_cast<float>(c % 13) - 0.004f);
  }
  const Mat y = cpu::official::quantized_product(x, w);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t o = 0; o < 2; ++o) {
      // By the definition, in double: Σ_blocks s_a · s_w · Σ_k code_a · code_w.
      double want = 0;
      for (int64_t b = 0; b < 2; ++b) {
        double amax = 1e-4;
        for (int64_t c = b * 128; c < (b + 1) * 128; ++c) amax = std::max(amax, std::fabs(double{x.at(r, c)}));
        const float sa = std::exp2(std::ceil(std::log2(static_cast<float>(amax) * (1.0f / 448.0f))));
        double partial = 0;
        for (int64_t c = b * 128; c < (b + 1) * 128; ++c)
          partial += double{round_e4m3(x.at(r, c) / sa)} * fp8_e4m3_decode(codes[static_cast<size_t>(o * k + c)]);
        want += partial * sa * scales[b];
      }
      EXPECT_NEAR(y.at(r, o), want, std::fabs(want) / 256 + 1e-6) << r << "," << o;
      EXPECT_EQ(cpu::official::round_bf16(y.at(r, o)), y.at(r, o));  // a bf16 result
    }
}

TEST(OfficialNumerics, OfficialPrecisionHasItsOwnFingerprintLabelAndIsRefusedOnCuda) {
  EXPECT_EQ(model::v4::backend_label("cpu", "official", ""), "cpu official");
  EXPECT_EQ(model::v4::backend_label("cpu", "bf16", ""), "cpu fp32");
  EXPECT_EQ(model::parse_precision("official"), model::Precision::Official);
  EXPECT_STREQ(model::precision_name(model::Precision::Official), "official");
  const std::string dir = test::temp_dir("official_cuda");
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir, 1, DType::F4_E2M1X2);
  try {
    model::v4::load_model(dir, model::Device::Cuda, model::Precision::Official);
    FAIL() << "a CUDA model with official numerics was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision official (DeepSeek's own numerics) runs on the CPU backend only"),
              std::string::npos)
        << e.what();
  }
}

// A sequence's official numbers do not depend on its batch: every op is row-local, as in the reference numerics.
TEST(OfficialNumerics, BatchedRowsEqualSoloRows) {
  const std::string dir = test::temp_dir("official_batch");
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir, 4, DType::F4_E2M1X2);
  const model::v4::Model m = model::v4::load_model(dir, model::Device::Cpu, model::Precision::Official);
  std::vector<int32_t> a, b;
  for (int i = 0; i < 150; ++i) a.push_back((i * 31 + 7) % 512);
  for (int i = 0; i < 40; ++i) b.push_back((i * 17 + 3) % 512);
  model::SequenceState sa = m.new_sequence(nullptr, 200), sb = m.new_sequence(nullptr, 200);
  const Mat solo_a = m.forward(a, sa), solo_b = m.forward(b, sb);
  model::SequenceState ta = m.new_sequence(nullptr, 200), tb = m.new_sequence(nullptr, 200);
  std::vector<model::SequenceChunk> chunks{{a, &ta, true}, {b, &tb, true}};
  const std::vector<Mat> both = m.forward_batch(chunks);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0].v, solo_a.v);
  EXPECT_EQ(both[1].v, solo_b.v);
}

}  // namespace
}  // namespace strata
