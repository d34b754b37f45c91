// The compile cache of structured outputs (text/grammar/grammar_cache.h): a repeated source is a hit with the same
// compiled grammar, a failure fails again from the cache with its message and position, and every cap is a
// GrammarError saying which limit.
#include "text/grammar/grammar_cache.h"

#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "text/grammar/ebnf_parser.h"

namespace strata::text::grammar {
namespace {

using testing::accepts;
using testing::byte_vocab;

TEST(GrammarCache, HitsMissesAndTheKind) {
  GrammarCache cache(byte_vocab(), nullptr);
  const auto a = cache.get(SourceKind::kRegex, "[a-c]+");
  EXPECT_EQ(cache.get(SourceKind::kRegex, "[a-c]+"), a);
  EXPECT_NE(cache.get(SourceKind::kEbnf, "root ::= [a-c]+"), a) << "the kind is part of the key";
  EXPECT_TRUE(accepts(a, "abc"));
  EXPECT_TRUE(accepts(cache.get(SourceKind::kChoice, R"(["yes", "no"])"), "no"));
  EXPECT_TRUE(accepts(cache.get(SourceKind::kJsonSchema, R"({"type": "integer"})"), "-12"));
  EXPECT_TRUE(accepts(cache.get(SourceKind::kJsonObject, ""), "{\"a\": [1]}"));
  const GrammarCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 5);
  EXPECT_EQ(s.entries, 5);
  EXPECT_THROW(cache.get(SourceKind::kMarkupEbnf, "root ::= \"a\""), Error) << "no markup vocabulary";
}

TEST(GrammarCache, FailuresAreCachedWithTheirPosition) {
  GrammarCache cache(byte_vocab(), nullptr);
  for (int round = 0; round < 2; ++round) {
    try {
      cache.get(SourceKind::kEbnf, "root ::= \"a\"\nb ::= \"unterminated");
      FAIL() << "expected a GrammarError";
    } catch (const GrammarError& e) {
      EXPECT_EQ(e.line(), 2) << e.what();
      EXPECT_GT(e.column(), 0) << e.what();
    }
  }
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_THROW(cache.get(SourceKind::kChoice, "[1]"), GrammarError);
  EXPECT_THROW(cache.get(SourceKind::kChoice, "[]"), GrammarError);
}

TEST(GrammarCache, LimitsAreErrorsNamingTheLimit) {
  GrammarCacheLimits limits;
  limits.max_source_bytes = 16;
  limits.max_symbols = 200;
  limits.max_entries = 2;
  GrammarCache cache(byte_vocab(), nullptr, limits);
  try {
    cache.get(SourceKind::kRegex, std::string(17, 'a'));
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("17 bytes, over the limit of 16"), std::string::npos) << e.what();
  }
  try {
    cache.get(SourceKind::kRegex, "[a-z]{1,200}");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("over the limit of 200"), std::string::npos) << e.what();
  }
  limits = {};
  limits.max_compile_time = std::chrono::milliseconds(0);
  GrammarCache slow(byte_vocab(), nullptr, limits);
  try {
    slow.get(SourceKind::kRegex, "abc");
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("compiling took over the limit of 0 ms"), std::string::npos) << e.what();
  }
  // Least recently used entries go first.
  GrammarCache small(byte_vocab(), nullptr, GrammarCacheLimits{64, 1 << 16, std::chrono::milliseconds(10000), 2});
  small.get(SourceKind::kRegex, "a");
  small.get(SourceKind::kRegex, "b");
  small.get(SourceKind::kRegex, "a");
  small.get(SourceKind::kRegex, "c");  // drops "b"
  small.get(SourceKind::kRegex, "a");
  EXPECT_EQ(small.stats().hits, 2);
  small.get(SourceKind::kRegex, "b");
  EXPECT_EQ(small.stats().misses, 4);
  EXPECT_EQ(small.stats().entries, 2);
}

}  // namespace
}  // namespace strata::text::grammar
