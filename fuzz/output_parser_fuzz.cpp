// Fuzz target for text::OutputParser. Input: one flags byte, one seed byte, then the model output text.
// Properties checked (any failure aborts, which libFuzzer records as a crash):
//   * no crash, leak or undefined behaviour on any text;
//   * the text cut into pieces (1-byte pieces, or chunk sizes drawn from the seed) gives the same reasoning,
//     content, tool calls and warnings as one push() of the whole;
//   * the deltas of every call add up to tool_calls();
//   * for valid UTF-8 input: every delta is valid UTF-8 and every call's arguments are a JSON object;
//   * text without '<' comes back unchanged (as reasoning in thinking mode, as content otherwise).
// fuzz-sources: src/text/output_parser.cpp src/text/dsml.cpp
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "text/output_parser.h"

namespace {

using strata::text::OutputDelta;
using strata::text::OutputParser;
using strata::text::ParserOptions;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "output_parser_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as JSON parsers demand.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      n = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < low || b > high) : (b & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

struct Call {
  std::string id, name, arguments;
  bool operator==(const Call&) const = default;
};
struct Result {
  std::string reasoning, content;
  std::vector<Call> calls, parsed;
  std::vector<std::string> warnings;
  bool operator==(const Result&) const = default;
};

void collect(const OutputDelta& delta, Result& result, bool utf8) {
  result.reasoning += delta.reasoning_content;
  result.content += delta.content;
  if (utf8) require(valid_utf8(delta.reasoning_content) && valid_utf8(delta.content), "delta text is valid UTF-8");
  for (const auto& d : delta.tool_calls) {
    if (utf8) require(valid_utf8(d.arguments_delta), "argument delta is valid UTF-8");
    if (d.index == static_cast<int>(result.calls.size())) {
      require(d.id.has_value() && d.name.has_value(), "a call's first delta carries id and name");
      result.calls.push_back({*d.id, *d.name, ""});
    } else {
      require(d.index >= 0 && d.index < static_cast<int>(result.calls.size()), "delta index refers to a started call");
      require(!d.id.has_value() && !d.name.has_value(), "only a call's first delta carries id and name");
    }
    result.calls[static_cast<size_t>(d.index)].arguments += d.arguments_delta;
  }
}

Result run(std::string_view text, const ParserOptions& options, const std::vector<size_t>& cuts) {
  const bool utf8 = valid_utf8(text);
  OutputParser parser(options);
  Result result;
  size_t start = 0;
  for (const size_t cut : cuts) {
    collect(parser.push(text.substr(start, cut - start)), result, utf8);
    start = cut;
  }
  collect(parser.push(text.substr(start)), result, utf8);
  collect(parser.finish(), result, utf8);
  for (const auto& c : parser.tool_calls()) result.parsed.push_back({c.id, c.name, c.arguments});
  result.warnings = parser.warnings();
  return result;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  uint32_t state = data[1] * 2654435761u + 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  ParserOptions options;
  options.thinking = (flags & 1) != 0;
  options.tools_enabled = (flags & 2) == 0;

  const Result whole = run(text, options, {});
  require(whole.calls == whole.parsed, "deltas add up to tool_calls()");
  if (valid_utf8(text)) {
    for (const Call& call : whole.parsed) {
      require(nlohmann::json::accept(call.arguments), "arguments are JSON");
      require(call.arguments.front() == '{', "arguments are a JSON object");
    }
  }
  if (text.find('<') == std::string_view::npos) {
    require((options.thinking ? whole.reasoning : whole.content) == text, "text without markup is unchanged");
  }

  std::vector<size_t> cuts;
  const size_t max_chunk = 1 + (flags >> 3);  // 1..32 bytes
  for (size_t at = 0;;) {
    state = state * 1103515245u + 12345u;
    at += (flags & 4) ? 1 : 1 + (state >> 16) % max_chunk;
    if (at >= text.size()) break;
    cuts.push_back(at);
  }
  require(run(text, options, cuts) == whole, "streaming result equals one-shot result");
  return 0;
}
