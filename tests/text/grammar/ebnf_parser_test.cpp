// The EBNF dialect: each construct accepts and rejects what it should, and every bad grammar fails with a message
// naming the problem and its line:column.
#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "text/grammar/ebnf_parser.h"

namespace strata::text::grammar {
namespace {

using testing::accepts;
using testing::accepts_prefix;
using testing::byte_vocab;

std::shared_ptr<const CompiledGrammar> compile(std::string_view ebnf) {
  return CompiledGrammar::from_ebnf(ebnf, byte_vocab());
}

TEST(GrammarEbnf, LiteralsAndEscapes) {
  const auto g = compile(R"(root ::= "a\"b\\c\n" 'it\'s' "\x41\u00e9\U0001F600\t")");
  EXPECT_TRUE(accepts(g, "a\"b\\c\nit's" "A\xC3\xA9\xF0\x9F\x98\x80\t"));
  EXPECT_FALSE(accepts(g, "a\"b\\c\nits"));
  EXPECT_FALSE(accepts(g, "a\"b\\c"));  // a prefix is not a sentence
  EXPECT_TRUE(accepts_prefix(g, "a\"b\\c"));
}

TEST(GrammarEbnf, CharacterClasses) {
  const auto g = compile(R"(root ::= [a-c] [^a-z\n] [\u00e0-\u00ff] [-x] [\]] .)");
  EXPECT_TRUE(accepts(g, "bQ\xC3\xA0-]z"));
  EXPECT_TRUE(accepts(g, "a\xE4\xB8\xAD\xC3\xBFx]\xF0\x9F\x98\x80"));  // 中 is not in [a-z\n]; . takes an emoji
  EXPECT_FALSE(accepts(g, "dQ\xC3\xA0-]z"));
  EXPECT_FALSE(accepts(g, "aq\xC3\xA0-]z"));
  EXPECT_FALSE(accepts(g, "a\nb\xC3\xA0-]z"));
  EXPECT_FALSE(accepts(g, "aQ\xC3\x9F-]z"));  // U+00DF is below the range
  EXPECT_FALSE(accepts(g, "aQ\xC3\xA0y]z"));
  // Negated classes never match invalid UTF-8 or a surrogate's encoding.
  const auto any = compile("root ::= [^a]");
  EXPECT_FALSE(accepts(any, "\xFF"));
  EXPECT_FALSE(accepts(any, "\xED\xA0\x80"));
  EXPECT_FALSE(accepts(any, "\xC0\x80"));  // overlong NUL
  EXPECT_TRUE(accepts(any, "\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(accepts(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(GrammarEbnf, GroupingAlternationAndRepetition) {
  const auto g = compile(R"(
    root ::= item ("," item)*   # a comma list
    item ::= "x"+ | "y"? "z" | ("ab"){2,3}
  )");
  for (const char* ok : {"x", "xxx,z", "yz,ababab", "abab", "z,z,xx"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"", ",", "x,", "yyz", "ab", "abababab", "xy"}) EXPECT_FALSE(accepts(g, bad)) << bad;
  const auto bounds = compile(R"(root ::= "a"{2} "b"{1,} "c"{0,2})");
  EXPECT_TRUE(accepts(bounds, "aab"));
  EXPECT_TRUE(accepts(bounds, "aabbbcc"));
  EXPECT_FALSE(accepts(bounds, "ab"));
  EXPECT_FALSE(accepts(bounds, "aaab"));
  EXPECT_FALSE(accepts(bounds, "aabccc"));
}

TEST(GrammarEbnf, RecursionLeftRightAndNullable) {
  const auto left = compile(R"(root ::= root "+" num | num
                               num ::= [0-9]+)");
  EXPECT_TRUE(accepts(left, "1+22+333"));
  EXPECT_FALSE(accepts(left, "1++2"));
  const auto nested = compile(R"g(root ::= "(" root ")" | "[" opt "]"
                                 opt ::= "" | root)g");
  EXPECT_TRUE(accepts(nested, "(([()]))") == false);
  EXPECT_TRUE(accepts(nested, "(([]))"));
  EXPECT_TRUE(accepts(nested, "[[([])]]"));
  EXPECT_FALSE(accepts(nested, "(()"));
  const auto nullable = compile(R"(root ::= a b c
                                   a ::= "a"?
                                   b ::= a a
                                   c ::= "c" | b)");
  EXPECT_TRUE(accepts(nullable, "a"));
  EXPECT_TRUE(accepts(nullable, "aaac"));
  EXPECT_TRUE(accepts(nullable, "c"));
  EXPECT_FALSE(accepts(nullable, "aaaaaac"));
}

TEST(GrammarEbnf, RulesSpanLinesAndEndAtTheNextDefinition) {
  const auto g = compile("root ::= a\n  | b\nb ::=\n \"b\"\n  \"c\"\na ::= \"a\"");
  EXPECT_TRUE(accepts(g, "a"));
  EXPECT_TRUE(accepts(g, "bc"));
  EXPECT_FALSE(accepts(g, "b"));
}

// The message and the position for each kind of bad grammar.
void expect_error(std::string_view ebnf, const std::string& message, int line, int column) {
  try {
    compile(ebnf);
    ADD_FAILURE() << "no error for: " << ebnf;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    EXPECT_EQ(e.line(), line) << e.what();
    EXPECT_EQ(e.column(), column) << e.what();
  }
}

TEST(GrammarEbnf, ErrorsNameTheProblemAndPosition) {
  expect_error("root ::= \"abc", "unterminated string literal (opened at 1:10)", 1, 14);
  expect_error("root ::= [abc", "unterminated character class", 1, 14);
  expect_error("root ::= a\n", "rule 'a' is used but never defined", 1, 10);
  expect_error("root ::= \"a\"\nroot ::= \"b\"", "rule 'root' is defined twice (first at 1:1)", 2, 1);
  expect_error("root = \"a\"", "expected '::=' after rule name 'root' but found '='", 1, 6);
  expect_error("root ::= (\"a\" | \"b\"", "expected ')' to close the '(' at 1:10", 1, 20);
  expect_error("root ::= \"a\")", "unbalanced ')'", 1, 13);
  expect_error("root ::= \"a\"{3,2}", "the maximum is below the minimum", 1, 16);
  expect_error("root ::= \"a\"{x}", "expected a number after '{'", 1, 14);
  expect_error("root ::= \"a\"{5000}", "over the limit of 1024", 1, 14);
  expect_error("root ::= [z-a]", "out of order", 1, 11);
  expect_error("root ::= []", "empty character class", 1, 10);
  expect_error("root ::= \"\\q\"", "unknown escape '\\q'", 1, 11);
  expect_error("root ::= \"\\x4\"", "escape needs 2 hex digits", 1, 11);
  expect_error("root ::= \"\\uD800\"", "surrogate", 1, 11);
  expect_error("root ::= \"\\U00110000\"", "above U+10FFFF", 1, 11);
  expect_error("root ::= \"a\"\n  * ", "expected an expression", 2, 3);
  expect_error("\n\n  root ::= @", "expected an expression (a \"literal\", a [class], a rule name or '(') but found '@'", 3, 12);
  expect_error("start ::= \"a\"", "no rule named 'root'", 0, 0);
  expect_error("root ::= \"\" | \"\"*", "can only produce the empty string", 0, 0);
  expect_error("root ::= a\na ::= \"x\" a", "rule 'a' can never finish", 0, 0);
  expect_error("root ::= \"\xff\"", "not valid UTF-8", 1, 11);
  expect_error("root ::= \"\xE0\x80\x80\"", "not valid UTF-8", 1, 11);  // overlong NUL
  expect_error("root ::= [\xF4\x90\x80\x80]", "not valid UTF-8", 1, 11);  // past U+10FFFF
}

// Parentheses nested past the bound are an error, not a stack overflow (parsing, lowering and printing recurse
// per level; 64 KB of '(' is within the server's source cap).
TEST(GrammarEbnf, DeepNestingIsAnErrorNotACrash) {
  expect_error("root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')'),
               "parentheses nest deeper than 1000 levels", 1, 1010);
  const auto g = compile("root ::= " + std::string(900, '(') + "\"a\" | \"b\"" + std::string(900, ')') + "+");
  EXPECT_TRUE(accepts(g, "abab"));
  EXPECT_FALSE(accepts(g, "abc"));
}

TEST(GrammarEbnf, PrintedGrammarParsesToTheSameLanguage) {
  const Grammar g = parse_ebnf(R"(root ::= ("a" | [^\n"\\\]-] | "\u00e9"){1,3} "\x01" tail?
                                  tail ::= [\U0001F600-\U0001F64F]*)");
  const auto reparsed = compile(to_ebnf(g));
  EXPECT_TRUE(accepts(reparsed, "aQ\xC3\xA9\x01"));
  EXPECT_FALSE(accepts(reparsed, "a\"\x01"));
  EXPECT_TRUE(accepts(reparsed, "]\x01") == false);
  EXPECT_TRUE(accepts(reparsed, "zz\x01\xF0\x9F\x98\x80"));
}

}  // namespace
}  // namespace strata::text::grammar
