// Regex → grammar and choice lists: each construct accepts and rejects what ECMA-262 would, and unsupported or bad
// patterns fail naming the column.
#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "text/grammar/ebnf_parser.h"
#include "text/grammar/regex_to_grammar.h"

namespace strata::text::grammar {
namespace {

using testing::accepts;
using testing::byte_vocab;

std::shared_ptr<const CompiledGrammar> regex(std::string_view re) {
  return CompiledGrammar::from_ebnf(regex_grammar(re), byte_vocab());
}

TEST(GrammarRegex, Constructs) {
  const auto phone = regex(R"(^\+?\d{1,3}[- ]?\(\d{3}\)\s?\d{3}-\d{4}$)");
  EXPECT_TRUE(accepts(phone, "+1 (555) 123-4567"));
  EXPECT_TRUE(accepts(phone, "44(555)1234567") == false);
  EXPECT_TRUE(accepts(phone, "44(555)123-4567"));
  const auto alt = regex("(?:cat|dog)s?|bird{2,}");
  for (const char* ok : {"cat", "dogs", "birdd", "birdddd"}) EXPECT_TRUE(accepts(alt, ok)) << ok;
  for (const char* bad : {"bird", "cats!", "do"}) EXPECT_FALSE(accepts(alt, bad)) << bad;
  const auto cls = regex(R"([^a-c\d]\w\W.[\u00e9-\u00ff]*\x41)");
  EXPECT_TRUE(accepts(cls, "z_ \xE4\xB8\xAD\xC3\xA9" "A"));
  EXPECT_FALSE(accepts(cls, "a_ xA"));
  EXPECT_FALSE(accepts(cls, "z_ \nA"));  // . excludes newlines
  const auto lazy = regex("a+?b*?(c)??");
  EXPECT_TRUE(accepts(lazy, "aabbc"));
  EXPECT_TRUE(accepts(regex("a{2}b{1,}c{0,2}"), "aabbbcc"));
  EXPECT_TRUE(accepts(regex(R"(a\.b\/c\$)"), "a.b/c$"));
  EXPECT_TRUE(accepts(regex("x{"), "x{"));  // a '{' that starts no quantifier is a literal (Annex B)
}

TEST(GrammarRegex, JsonStringBodyEscapesWhatJsonMust) {
  RegexOptions options;
  options.json_string = true;
  const auto g = CompiledGrammar::from_ebnf("root ::= " + regex_to_ebnf(R"(a"[\\x]\n.)", options), byte_vocab());
  EXPECT_TRUE(accepts(g, "a\\\"\\\\\\nz"));   // a\"\\\nz: the quote, backslash and newline as escapes
  EXPECT_TRUE(accepts(g, "a\\\"x\\nz"));
  EXPECT_FALSE(accepts(g, "a\"x\\nz"));        // a raw quote would end the JSON string
  EXPECT_TRUE(accepts(g, "a\\\"x\\n\\\""));    // . includes the quote, escaped
  options.search = true;
  const auto search = CompiledGrammar::from_ebnf("root ::= " + regex_to_ebnf("ab$", options), byte_vocab());
  EXPECT_TRUE(accepts(search, "xx ab"));
  EXPECT_TRUE(accepts(search, "\\u00e9ab"));
  EXPECT_FALSE(accepts(search, "abx"));
}

TEST(GrammarRegex, ChoiceLists) {
  const auto g = CompiledGrammar::from_ebnf(choice_grammar({"yes", "no", "maybe \"so\"", "日本"}), byte_vocab());
  for (const char* ok : {"yes", "no", "maybe \"so\"", "日本"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"ye", "yesno", "maybe"}) EXPECT_FALSE(accepts(g, bad)) << bad;
  EXPECT_THROW(choice_grammar({}), GrammarError);
  EXPECT_THROW(choice_grammar({"a", ""}), GrammarError);
}

void expect_error(std::string_view re, const std::string& message, int column) {
  try {
    regex_grammar(re);
    ADD_FAILURE() << "no error for " << re;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    EXPECT_EQ(e.column(), column) << e.what();
  }
}

TEST(GrammarRegex, ErrorsNameTheConstructAndColumn) {
  expect_error("(a)\\1", "backreferences are not supported", 4);
  expect_error("a(?=b)", "lookaround assertions are not supported", 2);
  expect_error("\\bword", "word boundaries", 1);
  expect_error("a^b", "'^' is supported only at the start", 2);
  expect_error("a$b", "'$' is supported only at the end", 2);
  expect_error("(ab", "group is not closed by ')'", 1);
  expect_error("ab)", "unbalanced ')'", 3);
  expect_error("[abc", "character class is not closed", 1);
  expect_error("*a", "a quantifier needs something to repeat", 1);
  expect_error("a{3,2}", "the maximum is below the minimum", 2);
  expect_error("a{2000}", "over the limit of 1024", 3);
  expect_error("[z-a]", "out of order", 2);
  expect_error("[]", "matches nothing", 1);
  expect_error("\\p{L}", "Unicode property escapes", 1);
  expect_error("^a|b$", "ambiguous", 1);
  expect_error("\\q", "unknown escape '\\q'", 1);
  // ECMA-262 repeats atoms only: a second quantifier is a syntax error, not a repetition of a repetition.
  expect_error("a**", "a quantifier cannot follow another quantifier", 3);
  expect_error("a{2}{3}", "a quantifier cannot follow another quantifier", 5);
  expect_error("a*?+", "a quantifier cannot follow another quantifier", 4);
  // Ill-formed UTF-8 (found by regex_grammar_fuzz: the lead byte FC decoded to U+128A2C, and the converter wrote an
  // escape its own EBNF parser refused); overlong forms and surrogates likewise.
  expect_error("ab\xFC\xA8\xA8\xAC", "the pattern is not valid UTF-8", 3);
  expect_error("[\xC0\xAF]", "the pattern is not valid UTF-8", 2);
  expect_error("\xED\xA0\x80", "the pattern is not valid UTF-8", 1);
  expect_error("a\xE4\xBD", "the pattern is not valid UTF-8", 2);
}

// Groups nested past the bound are an error, not a stack overflow of the compiling thread (found while writing the
// fuzz target: 64 KB of '(' — the server's source cap — recursed four frames per level).
TEST(GrammarRegex, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = std::string(100000, '(') + "a" + std::string(100000, ')');
  expect_error(deep, "groups nest deeper than 200 levels", 201);
  const std::string ok = std::string(150, '(') + "a|b" + std::string(150, ')') + "*";
  const auto g = regex(ok);
  EXPECT_TRUE(accepts(g, "abba"));
  EXPECT_FALSE(accepts(g, "abc"));
  // The EBNF the converter writes for the deepest allowed pattern stays inside the EBNF parser's bound.
  RegexOptions search;
  search.search = true;
  search.json_string = true;
  const std::string deepest = std::string(200, '(') + "[\"a]|b*" + std::string(200, ')') + "+";
  EXPECT_NO_THROW(CompiledGrammar::from_ebnf("root ::= " + regex_to_ebnf(deepest, search), byte_vocab()));
}

}  // namespace
}  // namespace strata::text::grammar
