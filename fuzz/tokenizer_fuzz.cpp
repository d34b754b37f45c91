// Fuzz target for text::Tokenizer (the DeepSeek tokenizer from .deps, fetched by scripts/setup.sh).
// Properties checked (a violation aborts, which libFuzzer records as a crash):
//   * no crash or undefined behaviour on any bytes: invalid UTF-8 is a strata::Error, nothing else is thrown;
//   * decode(encode(text)) == text for valid UTF-8, in plain mode (special spellings stay text) and with
//     special tokens parsed;
//   * plain mode never yields an added-token id;
//   * streaming detokenization of the ids gives the same text as decode.
// fuzz-sources: src/text/tokenizer.cpp src/text/bpe.cpp src/text/pretokenizer.cpp src/text/byte_level.cpp src/text/detokenizer.cpp
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "core/error.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

const strata::text::Tokenizer& tokenizer() {
  static const strata::text::Tokenizer t = strata::text::Tokenizer::load(STRATA_FUZZ_TOKENIZER_DIR);
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto& tok = tokenizer();
  const bool valid = strata::text::find_invalid_utf8(text) == std::string::npos;
  for (const bool parse_special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = tok.encode(text, parse_special);
    } catch (const strata::Error&) {
      require(!valid, "valid UTF-8 was rejected");
      return 0;
    }
    require(valid, "invalid UTF-8 was accepted");
    require(tok.decode(ids) == text, "decode(encode(text)) != text");
    if (!parse_special) {
      static const std::set<int32_t> added = [&] {
        std::set<int32_t> s;
        for (const auto& a : tok.added_tokens()) s.insert(a.id);
        return s;
      }();
      for (int32_t id : ids) require(!added.count(id), "plain mode produced an added token");
    }
    strata::text::IncrementalDetokenizer detok(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.push(id);
    streamed += detok.flush();
    require(streamed == text, "streamed detokenization differs from decode");
  }
  return 0;
}
