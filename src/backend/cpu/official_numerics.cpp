// DeepSeek's quantization steps on the CPU (official_numerics.h).
#include "backend/cpu/official_numerics.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace strata::cpu::official {

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
void round_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}
void round_bf16(Mat& x) { round_bf16(x.v.data(), static_cast<int64_t>(x.v.size())); }

namespace {

// Nearest multiple of the value's quantum (ties to even), where a format with `mantissa_bits` and smallest normal
// exponent `min_exp` has quantum 2^(floor(log2 |x|) − mantissa_bits), never below its subnormal step.
float round_to_format(float x, int mantissa_bits, int min_exp, float max_value) {
  const float a = std::fabs(x);
  if (a == 0.0f || std::isnan(x)) return x;
  if (a >= max_value) return std::copysign(max_value, x);
  int e = 0;
  std::frexp(a, &e);  // a = m · 2^e, m in [0.5, 1): floor(log2 a) = e − 1
  const int quantum = std::max(e - 1, min_exp) - mantissa_bits;
  const float q = std::ldexp(std::nearbyint(std::ldexp(a, -quantum)), quantum);
  return std::copysign(std::min(q, max_value), x);
}

}  // namespace

float round_e4m3(float x) { return round_to_format(x, 3, -6, 448.0f); }
float round_e2m1(float x) { return round_to_format(x, 1, 0, 6.0f); }

float pow2_ceil(float t) {
  const uint32_t bits = std::bit_cast<uint32_t>(t);
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127;
  return std::ldexp(1.0f, exponent + ((bits & 0x7fffffu) != 0 ? 1 : 0));
}

namespace {

constexpr float kInv448 = 1.0f / 448.0f;  // DeepSeek multiplies by the fp32 reciprocal

float fp8_block_scale(const float* x, int64_t n) {
  float amax = 1e-4f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return pow2_ceil(amax * kInv448);
}

}  // namespace

QuantizedActivations quantize_activations(const Mat& x, int64_t block) {
  QuantizedActivations q;
  q.rows = x.rows;
  q.cols = x.cols;
  q.block = block;
  const int64_t blocks = (x.cols + block - 1) / block;
  q.codes.resize(x.v.size());
  q.scales.resize(static_cast<size_t>(x.rows * blocks));
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k0 = b * block, n = std::min(block, x.cols - k0);
      const float* src = x.row(r) + k0;
      const float s = fp8_block_scale(src, n);
      q.scales[static_cast<size_t>(r * blocks + b)] = s;
      float* dst = q.codes.data() + r * x.cols + k0;
      for (int64_t i = 0; i < n; ++i) dst[i] = round_e4m3(std::clamp(src[i] / s, -448.0f, 448.0f));
    }
  return q;
}

void fake_fp8(float* x, int64_t n, int64_t block, bool rounds) {
  for (int64_t k0 = 0; k0 < n; k0 += block) {
    const int64_t m = std::min(block, n - k0);
    float* b = x + k0;
    if (rounds) {
      const float s = fp8_block_scale(b, m);
      for (int64_t i = 0; i < m; ++i) b[i] = round_e4m3(std::clamp(b[i] / s, -448.0f, 448.0f)) * s;
    }
    round_bf16(b, m);
  }
}

void fake_fp4(float* x, int64_t n) {
  constexpr int64_t kBlock = 32;
  const float min_amax = 6.0f * std::ldexp(1.0f, -126);
  for (int64_t k0 = 0; k0 < n; k0 += kBlock) {
    const int64_t m = std::min(kBlock, n - k0);
    float* b = x + k0;
    float amax = min_amax;
    for (int64_t i = 0; i < m; ++i) amax = std::max(amax, std::fabs(b[i]));
    const float s = pow2_ceil(amax / 6.0f);
    for (int64_t i = 0; i < m; ++i) b[i] = round_bf16(round_e2m1(std::clamp(b[i] / s, -6.0f, 6.0f)) * s);
  }
}

void hadamard_bf16(float* x, int64_t n) {
  if (n <= 0 || (n & (n - 1)) != 0) fail("hadamard: length ", n, " is not a power of two");
  round_bf16(x, n);
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i] * scale);
}

namespace {

// Row r of an FP8 weight as its codes, and its 128-column blocks' scales.
void fp8_row(const WeightRef& w, int64_t r, float* codes, float* scales) {
  const uint8_t* p = w.data + r * w.cols;
  for (int64_t c = 0; c < w.cols; ++c) codes[c] = fp8_e4m3_to_f32(p[c]);
  const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
  const float* s = w.block_scales + ((r + w.scale_row_offset) / w.block_rows) * scale_cols;
  std::copy(s, s + scale_cols, scales);
}

// Row r of an FP4 weight as its codes (low nibble = even column), and its 32-column blocks' scales.
void fp4_row(const WeightRef& w, int64_t r, float* codes, float* scales) {
  const uint8_t* p = w.data + r * (w.cols / 2);
  for (int64_t c = 0; c < w.cols; c += 2) {
    codes[c] = fp4_e2m1_to_f32(p[c / 2] & 0xf);
    codes[c + 1] = fp4_e2m1_to_f32(p[c / 2] >> 4);
  }
  const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
  const float* s = w.block_scales + (r + w.scale_row_offset) * scale_cols;
  std::copy(s, s + scale_cols, scales);
}

}  // namespace

Mat quantized_product(const Mat& x, const WeightRef& w) {
  const bool fp4 = w.dtype == DType::F4_E2M1X2;
  if (!fp4 && w.dtype != DType::F8_E4M3) fail("official product: weight dtype ", dtype_name(w.dtype), " is not FP8 or FP4");
  if (x.cols != w.cols) fail("official product: input has ", x.cols, " columns, weight ", w.cols);
  constexpr int64_t kActBlock = 128;
  const QuantizedActivations a = quantize_activations(x, kActBlock);
  // The K block a partial sum covers: the weight's block width (FP8: 128, as the activations'; FP4: 32).
  const int64_t kb = w.block_cols, k = w.cols, blocks = (k + kb - 1) / kb;
  if (kActBlock % kb != 0) fail("official product: weight blocks of ", kb, " columns do not divide 128");
  Mat y(x.rows, w.rows);
#pragma omp parallel
  {
    std::vector<float> codes(static_cast<size_t>(k)), scales(static_cast<size_t>(blocks));
#pragma omp for schedule(static)
    for (int64_t o = 0; o < w.rows; ++o) {
      if (fp4)
        fp4_row(w, o, codes.data(), scales.data());
      else
        fp8_row(w, o, codes.data(), scales.data());
      for (int64_t i = 0; i < x.rows; ++i) {
        const float* qa = a.codes.data() + i * k;
        float total = 0.0f;
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t k0 = b * kb, k1 = std::min(k, k0 + kb);
          float partial = 0.0f;
          for (int64_t c = k0; c < k1; ++c) partial += qa[c] * codes[static_cast<size_t>(c)];
          total += partial * (a.scale(i, k0) * scales[static_cast<size_t>(b)]);
        }
        y.at(i, o) = round_bf16(total);
      }
    }
  }
  return y;
}

Mat bf16_product(const Mat& x, const WeightRef& w) {
  if (x.cols != w.cols) fail("official product: input has ", x.cols, " columns, weight ", w.cols);
  Mat xb = x;
  round_bf16(xb);
  Mat y(x.rows, w.rows);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(w.cols));
#pragma omp for schedule(static)
    for (int64_t o = 0; o < w.rows; ++o) {
      w.row_f32(o, row.data());
      round_bf16(row.data(), w.cols);
      for (int64_t i = 0; i < x.rows; ++i) y.at(i, o) = round_bf16(dot(xb.row(i), row.data(), w.cols));
    }
  }
  return y;
}

Mat product(const Mat& x, const WeightRef& w) {
  // An fp32 product stays one whatever the weight's storage (a quantized router is not DeepSeek's layout: its values
  // are taken as they dequantize).
  if (w.fp32_product) return cpu::linear(x, w);
  if (w.dtype == DType::F8_E4M3 || w.dtype == DType::F4_E2M1X2) return quantized_product(x, w);
  return bf16_product(x, w);
}

}  // namespace strata::cpu::official
