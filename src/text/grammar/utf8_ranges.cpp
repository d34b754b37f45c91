#include "text/grammar/utf8_ranges.h"

#include <algorithm>

namespace strata::text::grammar {
namespace {

constexpr uint32_t kMaxForLength[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

int encoded_length(uint32_t cp) { return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4; }

// Byte i (0-based) of cp's n-byte encoding.
uint8_t encoded_byte(uint32_t cp, int n, int i) {
  const int shift = 6 * (n - 1 - i);
  if (i == 0) {
    static constexpr uint8_t kLead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    return static_cast<uint8_t>(kLead[n] | (cp >> shift));
  }
  return static_cast<uint8_t>(0x80 | ((cp >> shift) & 0x3F));
}

// [first, last] have the same encoded length n. Splits until the range is a product of byte ranges: that holds when
// for some i, bytes before i are equal and every byte from i on spans its whole continuation block except at i.
void split(uint32_t first, uint32_t last, int n, std::vector<Utf8Sequence>& out) {
  for (int i = 1; i < n; ++i) {
    // The block of code points sharing the first i bytes spans 6*(n-i) low bits.
    const uint32_t mask = (1u << (6 * (n - i))) - 1;
    if ((first & ~mask) != (last & ~mask)) {
      if ((first & mask) != 0) {
        split(first, first | mask, n, out);
        split((first | mask) + 1, last, n, out);
        return;
      }
      if ((last & mask) != mask) {
        split(first, (last & ~mask) - 1, n, out);
        split(last & ~mask, last, n, out);
        return;
      }
    }
  }
  Utf8Sequence sequence;
  for (int i = 0; i < n; ++i) sequence.push_back({encoded_byte(first, n, i), encoded_byte(last, n, i)});
  out.push_back(std::move(sequence));
}

}  // namespace

std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodepointRange>& ranges) {
  std::vector<Utf8Sequence> out;
  for (CodepointRange r : ranges) {
    // Surrogates have no UTF-8 encoding: cut them out.
    std::vector<CodepointRange> parts;
    if (r.first <= 0xDFFF && r.last >= 0xD800) {
      if (r.first < 0xD800) parts.push_back({r.first, 0xD7FF});
      if (r.last > 0xDFFF) parts.push_back({0xE000, r.last});
    } else {
      parts.push_back(r);
    }
    for (CodepointRange p : parts) {
      for (int n = encoded_length(p.first); n <= 4 && p.first <= p.last; ++n) {
        const uint32_t end = std::min(p.last, kMaxForLength[n - 1]);
        split(p.first, end, n, out);
        p.first = end + 1;
      }
    }
  }
  return out;
}

std::optional<uint32_t> decode_utf8(std::string_view text, size_t& pos) {
  if (pos >= text.size()) return std::nullopt;
  const auto b = static_cast<uint8_t>(text[pos]);
  if (b < 0x80) {
    ++pos;
    return b;
  }
  const int n = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
  if (n == 0 || pos + static_cast<size_t>(n) > text.size()) return std::nullopt;
  uint32_t cp = b & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    const auto c = static_cast<uint8_t>(text[pos + static_cast<size_t>(i)]);
    if ((c & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp <= kMaxForLength[n - 2] || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  pos += static_cast<size_t>(n);
  return cp;
}

}  // namespace strata::text::grammar
