#include "core/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace strata {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
constexpr std::array<DTypeInfo, 11> kDTypes = {{  // F4_E2M1X2 is not a safetensors type (see dtype.h)
    {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1},
    {DType::F8_E8M0, "F8_E8M0", 1},
    {DType::I64, "I64", 8},
    {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},
    {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
}};
}  // namespace

const char* dtype_name(DType t) {
  if (t == DType::F4_E2M1X2) return "F4_E2M1X2";
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  for (const auto& d : kDTypes)
    if (s == d.name) {
      *out = d.type;
      return true;
    }
  return false;
}

size_t dtype_size(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.size;
  return 0;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

float fp8_e4m3_decode(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xfu, mant = v & 0x7u;
  float r;
  if (exp == 0xf && mant == 0x7)
    r = NAN;
  else if (exp == 0)
    r = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  else
    r = std::ldexp(static_cast<float>(mant | 0x8u), static_cast<int>(exp) - 10);
  return sign ? -r : r;
}

const std::array<float, 256>& fp8_e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[static_cast<size_t>(v)] = fp8_e4m3_decode(static_cast<uint8_t>(v));
    return t;
  }();
  return table;
}

uint8_t f32_to_fp8_e4m3(float f) {
  // Codes 0x00..0x7e are the non-negative finite values in increasing order: round to the nearest by binary
  // search, saturating at ±448 (ties resolve to the smaller magnitude, which is enough for weight generation).
  static const std::array<float, 127> kValues = [] {
    std::array<float, 127> v{};
    for (int code = 0; code < 127; ++code) v[static_cast<size_t>(code)] = fp8_e4m3_decode(static_cast<uint8_t>(code));
    return v;
  }();
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  const auto hi = std::lower_bound(kValues.begin(), kValues.end(), a);
  if (hi == kValues.end()) return static_cast<uint8_t>(126 | sign);
  auto code = static_cast<uint8_t>(hi - kValues.begin());
  if (code > 0 && a - kValues[code - 1] <= *hi - a) --code;
  return static_cast<uint8_t>(code | sign);
}

uint8_t f32_to_fp4_e2m1(float f) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::fabs(f);
  uint8_t best = 0;
  for (uint8_t code = 1; code < 8; ++code)
    if (std::fabs(kMagnitudes[code] - a) < std::fabs(kMagnitudes[best] - a)) best = code;
  return static_cast<uint8_t>(best | (std::signbit(f) ? 0x8 : 0));
}

}  // namespace strata
