#pragma once
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace strata {

// Element types a checkpoint may hold. The names are the safetensors spellings. F4_E2M1X2 is internal: MXFP4
// weights arrive as I8/U8 tensors of packed pairs (low nibble = even column) and are viewed as this type.
enum class DType { F32, F16, BF16, F8_E4M3, F8_E8M0, I64, I32, I16, I8, U8, BOOL, F4_E2M1X2 };

const char* dtype_name(DType t);
// Parses a safetensors dtype string; returns false for unknown spellings.
bool parse_dtype(const std::string& s, DType* out);
size_t dtype_size(DType t);

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest even, as torch does when casting fp32 → bf16.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
// OCP FP8 E4M3 (the "fn" variant: no infinities, 0x7f/0xff are NaN), as in torch.float8_e4m3fn. A table lookup:
// dequantizing FP8 weights row by row is on the CPU backend's hot path.
float fp8_e4m3_decode(uint8_t v);  // the arithmetic definition, used to build the table
const std::array<float, 256>& fp8_e4m3_table();
inline float fp8_e4m3_to_f32(uint8_t v) { return fp8_e4m3_table()[v]; }
uint8_t f32_to_fp8_e4m3(float f);
// FP4 E2M1: sign, 2 exponent bits, 1 mantissa bit: {0, 0.5, 1, 1.5, 2, 3, 4, 6} and negatives.
inline float fp4_e2m1_to_f32(uint8_t nibble) {
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[nibble & 0xf];
}
uint8_t f32_to_fp4_e2m1(float f);  // nearest code, saturating at ±6

// UE8M0: an unsigned power-of-two scale, 2^(v-127); DeepSeek stores some block scales this way.
inline float e8m0_to_f32(uint8_t v) { return v == 0xff ? NAN : std::ldexp(1.0f, static_cast<int>(v) - 127); }

}  // namespace strata
