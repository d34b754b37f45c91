#pragma once
// Code-point ranges as UTF-8 byte-range sequences: the byte-level parser matches one byte at a time, so a character
// class such as [α-ω] becomes alternatives of byte sequences ([\xCE][\xB1-\xBF] | [\xCF][\x80-\x89]). The split
// follows the UTF-8 encoding boundaries (1, 2, 3 and 4-byte forms, then continuation-byte blocks), so each sequence
// is a product of byte ranges and the union of sequences is exactly the range's encodings — no overlong forms, no
// surrogates (U+D800..U+DFFF are never matched).
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "text/grammar/grammar.h"

namespace strata::text::grammar {

struct ByteRange {
  uint8_t first = 0;
  uint8_t last = 0;
};

// One UTF-8 shape: byte i of an encoding is in ranges[i].
using Utf8Sequence = std::vector<ByteRange>;

std::vector<Utf8Sequence> utf8_sequences(const std::vector<CodepointRange>& ranges);

// Decodes the code point at text[pos] and moves pos past it, or returns nullopt (pos unchanged) when the bytes there
// are not well-formed UTF-8: a stray continuation byte, C0/C1/F5-FF, a cut-off sequence, an overlong form, a
// surrogate or a code point past U+10FFFF (RFC 3629). The compilers read their sources through it.
std::optional<uint32_t> decode_utf8(std::string_view text, size_t& pos);

}  // namespace strata::text::grammar
