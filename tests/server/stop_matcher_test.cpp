// Stop strings across token boundaries: however the text is split, the released text is the text before the
// first stop string, and nothing that could still start a stop string is released early.
#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

struct Outcome {
  std::string text;
  bool stopped = false;
  bool operator==(const Outcome&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) { return os << "{\"" << o.text << "\", " << o.stopped << "}"; }

Outcome run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool include = false) {
  StopMatcher m(stops, include);
  Outcome o;
  for (const std::string& p : pieces) {
    o.text += m.push(p);
    if (m.stopped()) break;
  }
  if (!m.stopped()) o.text += m.flush();
  o.stopped = m.stopped();
  return o;
}

// The answer computed on the whole text at once.
Outcome reference(const std::vector<std::string>& stops, const std::string& text, bool include = false) {
  size_t best = std::string::npos, len = 0;
  for (const std::string& s : stops) {
    const size_t at = text.find(s);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (best == std::string::npos || end < best + len || (end == best + len && s.size() > len)) {
      best = at;
      len = s.size();
    }
  }
  if (best == std::string::npos) return {text, false};
  return {text.substr(0, include ? best + len : best), true};
}

// Every way to cut `text` into two and three pieces.
void check_every_split(const std::vector<std::string>& stops, const std::string& text) {
  for (bool include : {false, true}) {
    const Outcome expected = reference(stops, text, include);
    EXPECT_EQ(run(stops, {text}, include), expected);
    for (size_t i = 0; i <= text.size(); ++i) {
      EXPECT_EQ(run(stops, {text.substr(0, i), text.substr(i)}, include), expected) << "cut at " << i;
      for (size_t j = i; j <= text.size(); ++j)
        EXPECT_EQ(run(stops, {text.substr(0, i), text.substr(i, j - i), text.substr(j)}, include), expected)
            << "cuts at " << i << ", " << j;
    }
    std::vector<std::string> bytes;  // one byte per piece
    for (char ch : text) bytes.emplace_back(1, ch);
    EXPECT_EQ(run(stops, bytes, include), expected);
  }
}

TEST(StopMatcher, EverySplit) {
  check_every_split({"END"}, "The answer is 42.END and more");
  check_every_split({"END"}, "no stop string here, just EN");
  check_every_split({"aab"}, "xaaaab tail");          // a partial match that fails must release its first byte
  check_every_split({"abab"}, "xabababy");            // self-overlapping
  check_every_split({"\n\n", "###"}, "line one\nline ## two\n\nthree");
  check_every_split({"b", "abc"}, "xxabcx");          // the earliest match wins, not the longest stop string
  check_every_split({"ab", "abc"}, "xxabcx");         // same start: the longest
  check_every_split({"停止", "é"}, "中文 文本停止后");  // multi-byte UTF-8
  check_every_split({"x"}, "");
}

TEST(StopMatcher, HoldsBackOnlyPossibleStarts) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("hello S"), "hello ");
  EXPECT_EQ(m.push("T"), "");
  EXPECT_EQ(m.push("x"), "STx");  // "STx" can no longer become "STOP"
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.push("OP tail"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "STOP");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HeldTextIsCutOnCharacterBoundaries) {
  StopMatcher m({"éa"});
  EXPECT_EQ(m.push("x\xC3\xA9"), "x");  // "é" could start "éa"
  EXPECT_EQ(m.push("b"), "\xC3\xA9" "b");
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc"), "abc");
  EXPECT_EQ(m.flush(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, FlushReleasesHeldText) {
  StopMatcher m({"<end>"});
  EXPECT_EQ(m.push("done <en"), "done ");
  EXPECT_EQ(m.flush(), "<en");
  EXPECT_FALSE(m.stopped());
}

}  // namespace
}  // namespace strata::server
