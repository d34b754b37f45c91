// Fuzz target for the V4 chat encoder's request handling: arbitrary bytes as a chat-completions request body.
// Properties checked (a violation aborts, which libFuzzer records as a crash):
//   * no crash or undefined behaviour; a bad request is a strata::Error, nothing else is thrown;
//   * an accepted request renders to pieces that are never empty, never two text pieces in a row, and whose
//     control pieces are exactly spellings the encoder inserts.
// fuzz-sources: src/text/*.cpp src/text/grammar/*.cpp
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "text/chat_encoding.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "chat_request_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  std::vector<strata::text::PromptPiece> pieces;
  try {
    pieces = strata::text::encode_chat_v4_text(body);
  } catch (const strata::Error&) {
    return 0;
  }
  const auto& controls = strata::text::v4_control_spellings();
  for (size_t i = 0; i < pieces.size(); ++i) {
    require(!pieces[i].text.empty(), "empty piece");
    if (i > 0) require(pieces[i].control || pieces[i - 1].control, "two text pieces in a row");
    if (!pieces[i].control) continue;
    const std::string_view s = pieces[i].text;
    const bool known = std::any_of(controls.begin(), controls.end(), [&](std::string_view c) {
      return s == c || (s.rfind("<", 0) == 0 && s.find(strata::text::v4_tokens::kDsml) != std::string_view::npos) ||
             (s.rfind("</", 0) == 0 && s.find(strata::text::v4_tokens::kDsml) != std::string_view::npos);
    });
    require(known, "a control piece the encoder does not insert");
  }
  return 0;
}
