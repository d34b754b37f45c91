#pragma once
// NumPy's default generator, bit for bit, for what a checkpoint's layout is derived from: DeepSeek-V4.1's Engram
// hash multipliers are `np.random.default_rng(10007 · layer).integers(0, bound, 4, dtype=np.int64)`
// (docs/deepseek_v4_1_reference.md §2.2). default_rng(seed) is PCG64 (XSL-RR 128/64) seeded through a SeedSequence
// of the seed's 32-bit words; integers() draws with Lemire's bounded method (64-bit above 2^32 values, else 32-bit
// halves of one 64-bit output). Checked against NumPy 1.24's outputs (tests/v41_engram_test.cpp).
#include <cstdint>
#include <vector>

namespace strata::model::v41 {

// PCG64 is 128-bit arithmetic (a GCC/Clang extension; __extension__ keeps -Wpedantic quiet about it).
__extension__ typedef unsigned __int128 Uint128;

class NumpyDefaultRng {
 public:
  explicit NumpyDefaultRng(uint64_t seed);
  uint64_t next_uint64();
  // Generator.integers(low, high, n, dtype=np.int64): n draws in [low, high), high > low.
  std::vector<int64_t> integers(int64_t low, int64_t high, int64_t n);

 private:
  Uint128 state_ = 0, inc_ = 0;
  // The 32-bit draws' buffer of one 64-bit output (NumPy's buffered_bounded_lemire_uint32, per integers() call).
  uint64_t buffer_ = 0;
  int buffered_ = 0;
  uint32_t next_buffered_uint32();
};

}  // namespace strata::model::v41
