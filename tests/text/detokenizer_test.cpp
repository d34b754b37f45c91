// The incremental detokenizer: its pieces are always complete UTF-8 and add up to Tokenizer::decode.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace strata::text {
namespace {

const Tokenizer& v3() {
  static const Tokenizer t = Tokenizer::load(std::string(STRATA_TEST_DATA) + "/tokenizer-deepseek_v3");
  return t;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  append_utf8_lossy(bytes, true, out);
  return out;
}

const std::string kFffd = "\xEF\xBF\xBD";

TEST(DetokenizerUtf8, ReplacesMaximalInvalidSubpartsLikeHf) {
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("\xF0\x9F\x98"), kFffd);                    // truncated emoji: one replacement
  EXPECT_EQ(lossy("\xE0\x80"), kFffd + kFffd);                // E0 needs A0..BF next
  EXPECT_EQ(lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);    // a surrogate
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // past U+10FFFF
  EXPECT_EQ(lossy("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(lossy("\xE4\xB8x"), kFffd + "x");
  std::string out;
  EXPECT_EQ(append_utf8_lossy("a\xE4\xB8", false, out), 1u);  // the unfinished character waits
  EXPECT_EQ(out, "a");
  EXPECT_EQ(find_invalid_utf8("ok\xE4\xB8\xAD"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ok\xE4\xB8"), 2u);
}

TEST(DetokenizerStream, HoldsBackSplitCharacters) {
  IncrementalDetokenizer d(v3());
  EXPECT_EQ(d.push(28927), "");  // F0 9F 98: the start of U+1F600
  EXPECT_EQ(d.push(225), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.push(19923), "Hello");
  EXPECT_EQ(d.push(163), "");  // 0xE4: a lead byte
  EXPECT_EQ(d.push(67), kFffd + "a");  // ... not followed by a continuation byte
  EXPECT_EQ(d.push(28927), "");
  EXPECT_EQ(d.flush(), kFffd);  // unfinished at the end
  EXPECT_EQ(d.flush(), "");
}

TEST(DetokenizerStream, SkipsSpecialTokensOnRequest) {
  IncrementalDetokenizer keep(v3()), skip(v3(), /*skip_special=*/true);
  std::string a, b;
  for (const int32_t id : {0, 19923, 128803, 1, 999999}) {
    a += keep.push(id);
    b += skip.push(id);
  }
  EXPECT_EQ(a + keep.flush(), "<｜begin▁of▁sentence｜>Hello<｜User｜><｜end▁of▁sentence｜>");
  EXPECT_EQ(b + skip.flush(), "Hello<｜User｜>");
}

TEST(DetokenizerStream, PiecesAreValidAndAddUpToDecodeOnTheCorpus) {
  std::ifstream in(test::fixture("tokenizer/corpus.jsonl"));
  ASSERT_TRUE(in.good());
  size_t lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    if (lines % 3) continue;  // a third of the corpus keeps this quick under sanitizers
    const std::string text = nlohmann::json::parse(line).get<std::string>();
    std::vector<int32_t> ids = v3().encode(text, true);
    if (lines % 2) std::reverse(ids.begin(), ids.end());  // scrambled ids make invalid byte sequences
    for (const bool skip : {false, true}) {
      IncrementalDetokenizer d(v3(), skip);
      std::string streamed;
      for (const int32_t id : ids) {
        const std::string piece = d.push(id);
        ASSERT_EQ(find_invalid_utf8(piece), std::string_view::npos) << "corpus line " << lines + 1;
        streamed += piece;
      }
      streamed += d.flush();
      ASSERT_EQ(streamed, v3().decode(ids, skip)) << "corpus line " << lines + 1;
    }
  }
  EXPECT_GT(lines, 2000u);
}

}  // namespace
}  // namespace strata::text
