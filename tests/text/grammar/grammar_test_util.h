#pragma once
// Helpers for the grammar tests: whole-string acceptance through a matcher, and the brute-force mask (try every
// token, roll it back) that the cached masks must equal.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/grammar/compiled_grammar.h"
#include "text/grammar/grammar_matcher.h"
#include "text/grammar/token_vocabulary.h"

namespace strata::text::grammar::testing {

// A vocabulary of the given strings (id = index), no exclusions; eos appended as the last id when with_eos.
inline std::shared_ptr<const TokenVocabulary> vocab_of(std::vector<std::string> tokens, bool with_eos = true) {
  std::optional<int32_t> eos;
  if (with_eos) {
    eos = static_cast<int32_t>(tokens.size());
    tokens.push_back("</s>");
  }
  std::vector<bool> excluded(tokens.size(), false);
  return std::make_shared<const TokenVocabulary>(std::move(tokens), std::move(excluded), eos);
}

// All 256 single bytes as tokens: byte-level matching through the token API.
inline std::shared_ptr<const TokenVocabulary> byte_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  return vocab_of(std::move(tokens));
}

// The grammar accepts the whole of `text`.
inline bool accepts(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

// `text` is a prefix of some sentence.
inline bool accepts_prefix(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text);
}

inline std::vector<uint32_t> brute_force_mask(GrammarMatcher& m) {
  const TokenVocabulary& vocab = m.grammar().vocabulary();
  std::vector<uint32_t> words(vocab.mask_words(), 0);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (m.accept_token(id)) {
      words[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
      m.rollback(1);
    }
  }
  return words;
}

inline std::vector<uint32_t> fast_mask(GrammarMatcher& m) {
  std::vector<uint32_t> words(m.grammar().vocabulary().mask_words(), 0xFFFFFFFFu);
  m.fill_mask(words.data());
  return words;
}

// The ids whose bits differ, for a readable failure.
inline std::string mask_diff(const TokenVocabulary& vocab, const std::vector<uint32_t>& expected,
                             const std::vector<uint32_t>& actual) {
  std::string out;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const bool e = (expected[static_cast<size_t>(id) / 32] >> (id % 32)) & 1;
    const bool a = (actual[static_cast<size_t>(id) / 32] >> (id % 32)) & 1;
    if (e != a) out += std::string(e ? " missing " : " extra ") + std::to_string(id) + "'" + std::string(vocab.bytes(id)) + "'";
  }
  return out;
}

}  // namespace strata::text::grammar::testing
