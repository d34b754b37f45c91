// The matcher: token acceptance, rollback, termination, and masks equal to brute force (try every token, roll it
// back) at every step of random walks over small vocabularies and along real text in the DeepSeek vocabulary.
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "grammar_test_util.h"
#include "text/grammar/ebnf_parser.h"
#include "text/tokenizer.h"

namespace strata::text::grammar {
namespace {

using testing::brute_force_mask;
using testing::fast_mask;
using testing::mask_diff;
using testing::vocab_of;

// JSON (RFC 8259) with bounded whitespace, written the way users write GBNF: shared `ws` and `value` rules.
constexpr const char* kJsonGrammar = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]{0,20}
)";

std::vector<std::string> small_tokens() {
  return {"{", "}", "[", "]", "\"", "\":", "\",", "\"}", "a", "ab", "abc", "b\"", " ", "  ", "\n", ",", ", ", ":",
          "1", "12", "0", ".", "e", "-", "true", "tr", "ue", "null", "false", "\"a\"", "{\"", "\\", "\\n", "\\u",
          "00", "e9", "x", "\xE4", "\xB8\xAD", "\xE4\xB8\xAD", "\xC3\xA9", " \"", "}]", "],", "\"\n", "\x01"};
}

TEST(GrammarMatcher, AcceptsRejectsAndRollsBack) {
  const auto vocab = vocab_of({"{", "}", "\"a\"", ":", "1", " ", "x"});
  const auto g = CompiledGrammar::from_ebnf(kJsonGrammar, vocab);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.accept_token(6));  // x
  EXPECT_TRUE(m.accept_token(0));
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token(7));  // eos before the object is closed
  EXPECT_TRUE(m.accept_token(2));
  EXPECT_TRUE(m.accept_token(3));
  EXPECT_TRUE(m.accept_token(5));
  EXPECT_FALSE(m.accept_token(1));  // {"a": } has no value
  EXPECT_TRUE(m.accept_token(4));
  EXPECT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.can_end());
  EXPECT_EQ(m.steps(), 6);
  m.rollback(2);  // back to {"a":
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept_token(1));
  EXPECT_TRUE(m.accept_token(0));  // a nested object this time
  EXPECT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.accept_token(7));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(5));
  std::vector<uint32_t> words(vocab->mask_words());
  m.fill_mask(words.data());
  EXPECT_EQ(words[0], 0u);  // nothing after the end
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.can_end());
  EXPECT_THROW(m.rollback(100), Error);
  m.reset();
  EXPECT_EQ(m.steps(), 0);
  EXPECT_TRUE(m.accept_token(0));
}

TEST(GrammarMatcher, ExcludedTokensAndEosInTheMask) {
  std::vector<std::string> tokens{"a", "b", "<|special|>", "</s>"};
  const auto vocab = std::make_shared<const TokenVocabulary>(tokens, std::vector<bool>{false, false, true, false}, 3);
  const auto g = CompiledGrammar::from_ebnf(R"(root ::= "a"+ | "<|special|>")", vocab);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.accept_token(2));  // excluded even though its text would match
  std::vector<uint32_t> words(1);
  m.fill_mask(words.data());
  EXPECT_EQ(words[0], 0b0001u);
  EXPECT_TRUE(m.accept_token(0));
  m.fill_mask(words.data());
  EXPECT_EQ(words[0], 0b1001u);  // a or eos
}

// Random walks: at every step the mask equals brute force; the walk picks an allowed token, sometimes rolls back.
void random_walks(const char* ebnf, int walks, int steps, uint32_t seed) {
  const auto vocab = vocab_of(small_tokens());
  const auto g = CompiledGrammar::from_ebnf(ebnf, vocab);
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int walk = 0; walk < walks; ++walk) {
    GrammarMatcher m(g);
    std::string text;
    for (int step = 0; step < steps; ++step) {
      const std::vector<uint32_t> fast = fast_mask(m);
      const std::vector<uint32_t> brute = brute_force_mask(m);
      ASSERT_EQ(fast, brute) << "after '" << text << "':" << mask_diff(*vocab, brute, fast);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if ((brute[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) allowed.push_back(id);
      }
      if (allowed.empty() || m.is_terminated()) break;
      if (m.steps() > 0 && rng() % 7 == 0) {
        m.rollback(1);
        continue;
      }
      const int32_t id = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(id));
      text += vocab->bytes(id);
      ++accepted;
    }
  }
  EXPECT_GT(accepted, walks * steps / 4);  // the walks went somewhere
}

TEST(GrammarMatcher, MasksEqualBruteForceOnJson) { random_walks(kJsonGrammar, 40, 40, 1); }

TEST(GrammarMatcher, MasksEqualBruteForceOnOtherShapes) {
  random_walks(R"(root ::= item ("," " "? item)*
                  item ::= "a"+ | "[" root? "]" | "\"" [^"]* "\"" | [0-9]{1,3} ".")", 30, 30, 2);
  random_walks(R"(root ::= root "e" | "t" "r"? "u" | [\u4e00-\u9fff]+ "\"")", 30, 20, 3);
  random_walks(R"(root ::= x x
                  x ::= "" | "ab" | "a" "b"? "c"* | "\\" "n")", 30, 10, 4);
}

// Along real JSON in the DeepSeek vocabulary: every step's mask equals brute force over the 129k ids.
TEST(GrammarMatcher, MasksEqualBruteForceOnTheDeepSeekVocabulary) {
  const std::filesystem::path dir = std::filesystem::path(STRATA_TEST_DATA) / "tokenizer-deepseek_v3";
  if (!std::filesystem::exists(dir / "tokenizer.json")) GTEST_SKIP() << "no " << dir << " (scripts/setup.sh downloads it)";
  const Tokenizer tokenizer = Tokenizer::load(dir.string());
  const auto vocab = std::make_shared<const TokenVocabulary>(TokenVocabulary::from_tokenizer(tokenizer));
  const auto g = CompiledGrammar::from_ebnf(kJsonGrammar, vocab);
  const std::string text = R"({"name": "Strata \u00e9\n", "n": [1, -2.5e3, true], "k": {}})";
#ifdef STRATA_SANITIZED  // each brute-force mask tries all 128k ids: a few steps under the sanitizers
  const size_t checked = 3;
#else
  const size_t checked = 40;
#endif
  GrammarMatcher m(g);
  const std::vector<int32_t> ids = tokenizer.encode(text);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i < checked || i + 1 == ids.size()) {
      const std::vector<uint32_t> fast = fast_mask(m);
      const std::vector<uint32_t> brute = brute_force_mask(m);
      ASSERT_EQ(fast, brute) << "before token " << i << ":" << mask_diff(*vocab, brute, fast);
    }
    ASSERT_TRUE(m.accept_token(ids[i])) << "token " << i << " '" << vocab->bytes(ids[i]) << "'";
  }
  EXPECT_TRUE(m.can_end());
  ASSERT_TRUE(tokenizer.eos_id());
  EXPECT_TRUE(m.accept_token(*tokenizer.eos_id()));
  EXPECT_FALSE(vocab->matchable(*tokenizer.eos_id()));
  for (const AddedToken& added : tokenizer.added_tokens()) EXPECT_FALSE(vocab->matchable(added.id)) << added.content;
}

}  // namespace
}  // namespace strata::text::grammar
