#include "text/byte_level.h"

namespace strata::text {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_code_point_.fill(-1);
  const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
  int next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const int cp = printable(b) ? b : next_extra++;
    byte_of_code_point_[cp] = static_cast<int16_t>(b);
    if (cp < 0x80) {
      chars_[b][0] = static_cast<char>(cp);
      lengths_[b] = 1;
    } else {
      chars_[b][0] = static_cast<char>(0xC0 | (cp >> 6));
      chars_[b][1] = static_cast<char>(0x80 | (cp & 0x3F));
      lengths_[b] = 2;
    }
  }
}

void ByteLevelAlphabet::encode(std::string_view bytes, std::string& out) const {
  for (const char c : bytes) out += char_of(static_cast<uint8_t>(c));
}

void ByteLevelAlphabet::decode_token(std::string_view token, std::string& out) const {
  const size_t start = out.size();
  for (size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<uint8_t>(token[i]);
    int cp = -1;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((b0 & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
      i += 2;
    }
    const int byte = cp >= 0 && cp < 512 ? byte_of_code_point_[cp] : -1;
    if (byte < 0) {  // a character outside the alphabet: the token stands for its own bytes
      out.resize(start);
      out.append(token);
      return;
    }
    out += static_cast<char>(byte);
  }
}

}  // namespace strata::text
