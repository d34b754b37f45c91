#include "text/detokenizer.h"

#include "text/tokenizer.h"

namespace strata::text {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// For a lead byte: the sequence length and the allowed range of the second byte (Unicode Table 3-7); length 0
// for bytes that cannot start a sequence.
struct Lead {
  int length;
  uint8_t lo, hi;
};

Lead lead_of(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the valid sequence at bytes[i]; or, when it is not valid, -(length of its maximal valid prefix),
// with `truncated` set when that prefix runs to the end of the bytes.
int sequence_at(std::string_view bytes, size_t i, bool& truncated) {
  truncated = false;
  const auto b = static_cast<uint8_t>(bytes[i]);
  if (b < 0x80) return 1;
  const Lead lead = lead_of(b);
  if (lead.length == 0) return -1;
  for (int k = 1; k < lead.length; ++k) {
    if (i + k >= bytes.size()) {
      truncated = true;
      return -k;
    }
    const auto c = static_cast<uint8_t>(bytes[i + k]);
    const bool ok = k == 1 ? (c >= lead.lo && c <= lead.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return -k;
  }
  return lead.length;
}

}  // namespace

size_t append_utf8_lossy(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t ascii = i;
    while (ascii < bytes.size() && static_cast<uint8_t>(bytes[ascii]) < 0x80) ++ascii;
    out.append(bytes.substr(i, ascii - i));
    i = ascii;
    if (i >= bytes.size()) break;
    bool truncated = false;
    const int n = sequence_at(bytes, i, truncated);
    if (n > 0) {
      out.append(bytes.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else if (truncated && !final) {
      return i;  // may still be completed by the next bytes
    } else {
      out.append(kReplacement);
      i += static_cast<size_t>(-n);
    }
  }
  return i;
}

size_t find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    bool truncated = false;
    const int n = sequence_at(text, i, truncated);
    if (n <= 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_.append(tokenizer_->token_bytes(id, skip_special_));
  std::string out;
  const size_t used = append_utf8_lossy(pending_, false, out);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  append_utf8_lossy(pending_, true, out);
  pending_.clear();
  return out;
}

}  // namespace strata::text
