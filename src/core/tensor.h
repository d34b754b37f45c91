#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace strata {

// Row-major fp32 activations [rows, cols]: the CPU reference computes everything in fp32.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;

  Mat() = default;
  Mat(int64_t r, int64_t c, float fill = 0.0f) : rows(r), cols(c), v(static_cast<size_t>(r * c), fill) {}
  float* row(int64_t r) { return v.data() + r * cols; }
  const float* row(int64_t r) const { return v.data() + r * cols; }
  float& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  float at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

// A weight matrix [rows = out features, cols = in features] viewed in its stored dtype (usually memory-mapped
// from the checkpoint). Quantized weights carry one fp32 scale per block_rows × block_cols block, row-major over
// blocks, dequantized = value × scale: FP8 e4m3 with 128×128 blocks (DeepSeek's layout), MXFP4 (F4_E2M1X2, two
// values per byte) with 1×32 blocks.
struct WeightRef {
  DType dtype = DType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  const float* block_scales = nullptr;
  int64_t block_rows = 128, block_cols = 128;
  int64_t scale_row_offset = 0;  // a row slice of a larger FP8 matrix indexes the parent's scale blocks
  // DeepSeek's code keeps this product in fp32 (its parameter is fp32 there, bf16 in the checkpoint): the
  // compressors' projections, the router and the vocabulary head. Only `--precision official` reads it.
  bool fp32_product = false;

  int64_t row_bytes() const { return dtype == DType::F4_E2M1X2 ? cols / 2 : cols * static_cast<int64_t>(dtype_size(dtype)); }
  // Rows [r0, r0 + n) as a matrix of their own (no copy).
  WeightRef row_slice(int64_t r0, int64_t n) const;

  // Writes row r as fp32 into out[cols].
  void row_f32(int64_t r, float* out) const;
  float at(int64_t r, int64_t c) const;
};

}  // namespace strata
