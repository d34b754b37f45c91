#include "core/tensor.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace strata {

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

void WeightRef::row_f32(int64_t r, float* out) const {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, data + r * cols * 4, static_cast<size_t>(cols) * 4);
      return;
    // 16-bit values are read byte-wise: a safetensors file packs tensors back to back, so one after an odd-sized
    // tensor (e.g. a UE8M0 scale) starts at an odd address.
    case DType::BF16:
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(load_u16(data + (r * cols + c) * 2));
      return;
    case DType::F16:
      for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(load_u16(data + (r * cols + c) * 2));
      return;
    case DType::F8_E4M3: {
      const uint8_t* p = data + r * cols;
      const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
      const float* scales = block_scales + ((r + scale_row_offset) / block_rows) * scale_cols;
      const std::array<float, 256>& table = fp8_e4m3_table();  // hoisted: this loop is the FP8 hot path
      for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
        const float scale = scales[c0 / block_cols];
        const int64_t c1 = std::min(cols, c0 + block_cols);
        for (int64_t c = c0; c < c1; ++c) out[c] = table[p[c]] * scale;
      }
      return;
    }
    case DType::F4_E2M1X2: {
      const uint8_t* p = data + r * (cols / 2);
      const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
      const float* scales = block_scales + ((r + scale_row_offset) / block_rows) * scale_cols;
      for (int64_t c = 0; c < cols; c += 2) {
        out[c] = fp4_e2m1_to_f32(p[c / 2] & 0xf) * scales[c / block_cols];
        out[c + 1] = fp4_e2m1_to_f32(p[c / 2] >> 4) * scales[(c + 1) / block_cols];
      }
      return;
    }
    default:
      for (int64_t c = 0; c < cols; ++c) out[c] = 0.0f;  // unreachable: the loader admits only the types above
  }
}

float WeightRef::at(int64_t r, int64_t c) const {
  switch (dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, data + (r * cols + c) * 4, 4);
      return f;
    }
    case DType::BF16: return bf16_to_f32(load_u16(data + (r * cols + c) * 2));
    case DType::F16: return f16_to_f32(load_u16(data + (r * cols + c) * 2));
    case DType::F8_E4M3: {
      const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
      return fp8_e4m3_to_f32(data[r * cols + c]) *
             block_scales[((r + scale_row_offset) / block_rows) * scale_cols + c / block_cols];
    }
    case DType::F4_E2M1X2: {
      const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
      const uint8_t byte = data[r * (cols / 2) + c / 2];
      return fp4_e2m1_to_f32(c % 2 ? byte >> 4 : byte & 0xf) *
             block_scales[((r + scale_row_offset) / block_rows) * scale_cols + c / block_cols];
    }
    default: return 0.0f;
  }
}

WeightRef WeightRef::row_slice(int64_t r0, int64_t n) const {
  WeightRef s = *this;
  s.rows = n;
  s.data = data + r0 * row_bytes();
  s.scale_row_offset = scale_row_offset + r0;
  return s;
}

}  // namespace strata
