#include "model/deepseek_v41/numpy_random.h"

#include <array>

#include "core/error.h"

namespace strata::model::v41 {

namespace {

// SeedSequence's constants (NumPy's bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

// SeedSequence(seed).generate_state(4, np.uint64): the seed's 32-bit words mixed into a pool of four, then eight
// 32-bit outputs read as four little-endian 64-bit words.
std::array<uint64_t, 4> seed_sequence_state(uint64_t seed) {
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(static_cast<uint32_t>(seed));
    seed >>= 32;
  } while (seed != 0);
  uint32_t hash_const = kInitA;
  const auto hashmix = [&](uint32_t value) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    value ^= value >> 16;
    return value;
  };
  const auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixMultL * x - kMixMultR * y;
    r ^= r >> 16;
    return r;
  };
  std::array<uint32_t, kPoolSize> pool{};
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
  for (size_t src = 0; src < pool.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = pool.size(); src < entropy.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst) pool[dst] = mix(pool[dst], hashmix(entropy[src]));
  uint32_t out_const = kInitB;
  std::array<uint32_t, 8> words{};
  for (size_t i = 0; i < words.size(); ++i) {
    uint32_t v = pool[i % pool.size()];
    v ^= out_const;
    out_const *= kMultB;
    v *= out_const;
    v ^= v >> 16;
    words[i] = v;
  }
  std::array<uint64_t, 4> state{};
  for (size_t i = 0; i < state.size(); ++i) state[i] = uint64_t{words[2 * i]} | (uint64_t{words[2 * i + 1]} << 32);
  return state;
}

constexpr Uint128 kPcgMultiplier =
    (static_cast<Uint128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;

Uint128 u128(uint64_t high, uint64_t low) { return (static_cast<Uint128>(high) << 64) | low; }

}  // namespace

NumpyDefaultRng::NumpyDefaultRng(uint64_t seed) {
  const std::array<uint64_t, 4> s = seed_sequence_state(seed);
  // pcg64_set_seed: state from words 0-1, increment from words 2-3 (high word first), then PCG's srandom.
  inc_ = (u128(s[2], s[3]) << 1) | 1;
  state_ = 0;
  state_ = state_ * kPcgMultiplier + inc_;
  state_ += u128(s[0], s[1]);
  state_ = state_ * kPcgMultiplier + inc_;
}

uint64_t NumpyDefaultRng::next_uint64() {
  state_ = state_ * kPcgMultiplier + inc_;
  const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyDefaultRng::next_buffered_uint32() {
  if (buffered_ == 0) {
    buffer_ = next_uint64();
    buffered_ = 1;
  } else {
    buffer_ >>= 32;
    buffered_ -= 1;
  }
  return static_cast<uint32_t>(buffer_);
}

std::vector<int64_t> NumpyDefaultRng::integers(int64_t low, int64_t high, int64_t n) {
  if (high <= low) fail("numpy integers: high ", high, " must exceed low ", low);
  if (n < 0) fail("numpy integers: a negative count ", n);
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low) - 1;  // inclusive, as NumPy's rng
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  buffered_ = 0;  // each integers() call starts its own 32-bit buffer
  for (int64_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    if (range == 0) {
      v = 0;
    } else if (range <= 0xFFFFFFFFULL) {
      if (range == 0xFFFFFFFFULL) {
        v = next_buffered_uint32();
      } else {
        const uint64_t excl = range + 1;
        uint64_t m = uint64_t{next_buffered_uint32()} * excl;
        uint32_t leftover = static_cast<uint32_t>(m);
        if (leftover < excl) {
          const auto threshold = static_cast<uint32_t>((0xFFFFFFFFULL - range) % excl);
          while (leftover < threshold) {
            m = uint64_t{next_buffered_uint32()} * excl;
            leftover = static_cast<uint32_t>(m);
          }
        }
        v = m >> 32;
      }
    } else if (range == ~uint64_t{0}) {
      v = next_uint64();
    } else {
      const uint64_t excl = range + 1;
      Uint128 m = static_cast<Uint128>(next_uint64()) * excl;
      uint64_t leftover = static_cast<uint64_t>(m);
      if (leftover < excl) {
        const uint64_t threshold = (~uint64_t{0} - range) % excl;
        while (leftover < threshold) {
          m = static_cast<Uint128>(next_uint64()) * excl;
          leftover = static_cast<uint64_t>(m);
        }
      }
      v = static_cast<uint64_t>(m >> 64);
    }
    out.push_back(static_cast<int64_t>(static_cast<uint64_t>(low) + v));
  }
  return out;
}

}  // namespace strata::model::v41
