#pragma once
// GPT-2's byte-level alphabet, as HF tokenizers' ByteLevel pre-tokenizer and decoder use it: every byte maps to
// one printable code point (the printable Latin-1 bytes to themselves, the other 68 to U+0100.. in byte order),
// so any byte string becomes a string of "characters" a BPE vocabulary can spell.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata::text {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  // The UTF-8 spelling of the code point byte b maps to (1 or 2 bytes).
  std::string_view char_of(uint8_t b) const { return {chars_[b].data(), lengths_[b]}; }

  // Appends the byte-level spelling of raw bytes.
  void encode(std::string_view bytes, std::string& out) const;

  // Appends the bytes a vocabulary token stands for, the way HF's ByteLevel decoder does: when every character
  // of the token is in the alphabet, the bytes it maps back to; otherwise (e.g. "<｜User｜>") the token's own
  // UTF-8 bytes.
  void decode_token(std::string_view token, std::string& out) const;

 private:
  ByteLevelAlphabet();
  std::array<std::array<char, 2>, 256> chars_{};
  std::array<uint8_t, 256> lengths_{};
  std::array<int16_t, 512> byte_of_code_point_{};  // -1 where the code point is not in the alphabet
};

}  // namespace strata::text
