#pragma once
// What the chat-encoding tests share (chat_encoding_test.cpp for V4, chat_encoding_v41_test.cpp for V4.1): reading
// a fixture file, the control pieces of a prompt, the invariants of every encoding, and the byte-for-byte check of
// a fixture directory's requests against the prompts the reference encoder wrote for them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_encoding.h"

namespace strata::text::testing {

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<std::string> controls_of(const std::vector<PromptPiece>& pieces) {
  std::vector<std::string> out;
  for (const PromptPiece& p : pieces)
    if (p.control) out.push_back(p.text);
  return out;
}

// Invariants of every encoding: no empty piece, no two text pieces in a row, control pieces only of the
// encoder's own spellings.
inline void expect_well_formed(const std::vector<PromptPiece>& pieces, const std::string& what,
                               const std::vector<std::string_view>& spellings) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_FALSE(pieces[i].text.empty()) << what << ": empty piece " << i;
    if (i > 0) {
      EXPECT_FALSE(!pieces[i].control && !pieces[i - 1].control) << what << ": adjacent text pieces at " << i;
    }
    if (pieces[i].control) {
      EXPECT_NE(std::find(spellings.begin(), spellings.end(), pieces[i].text), spellings.end())
          << what << ": unexpected control piece " << pieces[i].text;
    }
  }
}

// Every requests/NAME.json of `dir` (at least `at_least` of them), encoded by `encode`, is well formed and renders
// exactly expected/NAME.txt; `regenerate` says how the expected prompts are made.
inline void expect_fixtures_match(const std::filesystem::path& dir, size_t at_least,
                                  const std::function<std::vector<PromptPiece>(const std::string&)>& encode,
                                  const std::vector<std::string_view>& spellings, const std::string& regenerate) {
  namespace fs = std::filesystem;
  std::vector<fs::path> requests;
  for (const auto& entry : fs::directory_iterator(dir / "requests"))
    if (entry.path().extension() == ".json") requests.push_back(entry.path());
  std::sort(requests.begin(), requests.end());
  ASSERT_GE(requests.size(), at_least);
  for (const fs::path& request : requests) {
    SCOPED_TRACE(request.filename().string());
    const fs::path expected = dir / "expected" / (request.stem().string() + ".txt");
    ASSERT_TRUE(fs::exists(expected)) << "run " << regenerate;
    const std::vector<PromptPiece> pieces = encode(read_file(request));
    expect_well_formed(pieces, request.stem().string(), spellings);
    const std::string prompt = render_prompt(pieces), want = read_file(expected);
    if (prompt != want) {
      size_t at = 0;
      while (at < prompt.size() && at < want.size() && prompt[at] == want[at]) ++at;
      ADD_FAILURE() << "prompt differs from the reference at byte " << at << "\n got: ..."
                    << prompt.substr(at > 40 ? at - 40 : 0, 120) << "\nwant: ..."
                    << want.substr(at > 40 ? at - 40 : 0, 120);
    }
  }
}

}  // namespace strata::text::testing
