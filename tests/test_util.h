#pragma once
// Small helpers shared by the tests.
#include <cstdint>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/safetensors.h"

namespace strata::test {

inline std::string fixture(const std::string& name) { return std::string(STRATA_FIXTURES) + "/" + name; }

// A fresh directory under the system temp dir, unique per test process, removed when the process exits.
inline std::string temp_dir(const std::string& tag) {
  namespace fs = std::filesystem;
  static std::vector<fs::path> made;
  static const bool cleanup_registered = [] {
    std::atexit([] {
      std::error_code ec;
      for (const fs::path& p : made) fs::remove_all(p, ec);
    });
    return true;
  }();
  (void)cleanup_registered;
  const fs::path p = fs::temp_directory_path() / ("strata_test_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  made.push_back(p);
  return p.string();
}

inline std::vector<float> floats_of(const model::TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

inline std::vector<int64_t> int64s_of(const model::TensorView& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 8);
  return v;
}

// max |a - b| / max |b| over one row; +inf when either row holds a NaN or an infinity. (std::max(x, NaN) keeps x,
// so without the check a row of NaN logits would score 0; +inf fails every `error <= bar` and survives a running
// std::max over rows.)
inline double row_rel_error(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / std::max(den, 1e-30);
}

// Bit-identical and finite: two rows of the same NaNs compare equal under memcmp, which must not pass a
// bit-identity check. Names the first non-finite or differing element.
inline ::testing::AssertionResult same_finite_bits(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i]))
      return ::testing::AssertionFailure() << "element " << i << " is not finite (" << a[i] << " vs " << b[i] << ")";
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << " differs (" << a[i] << " vs " << b[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

// The message of the strata::Error `fn` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Under the sanitizers (CI's second run), slow suites run a spread-out subset of their cases.
#ifdef STRATA_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// n token ids below 500 (every test vocabulary is larger), a different sequence per salt.
inline std::vector<int32_t> token_ids(int64_t n, int64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + salt * 11 + 5) % 500);
  return t;
}

}  // namespace strata::test
