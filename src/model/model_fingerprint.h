#pragma once
// A model's fingerprint: a 128-bit hash of everything that decides its numbers (config, weights, backend), so state
// made by one engine is accepted only by another whose numbers are the same (deepseek_v4/fingerprint.h computes it).
#include <cstdint>
#include <cstdio>
#include <string>

namespace strata::model {

struct ModelFingerprint {
  uint64_t low = 0, high = 0;  // XXH128_hash_t's halves
  std::string hex() const {  // 32 hex digits, high half first
    char out[33];
    std::snprintf(out, sizeof out, "%016llx%016llx", static_cast<unsigned long long>(high),
                  static_cast<unsigned long long>(low));
    return out;
  }
  bool operator==(const ModelFingerprint&) const = default;
};

}  // namespace strata::model
