#pragma once
// What the three grammar-compiler fuzz targets (ebnf_grammar_fuzz, regex_grammar_fuzz, json_schema_grammar_fuzz)
// check once a source compiled: the compiled grammar is walked from its start, one random allowed token at a time,
// and at every step
//   * the cached mask (GrammarMatcher::fill_mask) equals the brute-force one (try every token, roll it back), so
//     the mask cache never allows a dead end nor forbids a live token;
//   * every token the mask allows is accepted by the matcher, and eos exactly when can_end();
// and the text of a walk that ended is a whole sentence for a fresh matcher. The vocabulary is every single byte
// plus a few multi-byte tokens (JSON punctuation, words, UTF-8), so tokens cross rule boundaries as BPE tokens do.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "text/grammar/byte_grammar.h"
#include "text/grammar/compiled_grammar.h"
#include "text/grammar/grammar_matcher.h"
#include "text/grammar/token_vocabulary.h"

namespace strata::fuzz {

inline void require(bool ok, const char* target, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "%s: property violated: %s\n", target, what);
    std::abort();
  }
}

// Bytes 0..255, then multi-byte tokens, then eos.
inline std::shared_ptr<const text::grammar::TokenVocabulary> walk_vocabulary() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    for (const char* t : {"\": ", "\", \"", "{\"", "\"}", "[\"", "\"]", "true", "null", "false", "-1", "00", "12",
                          "ab", "abc", "a b", " \"", "\\\"", "\\u00", "é", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\n  ",
                          "  ", "0.5", "e+", "::=", "xyz"}) {
      tokens.emplace_back(t);
    }
    const auto eos = static_cast<int32_t>(tokens.size());
    tokens.emplace_back("</s>");
    std::vector<bool> excluded(tokens.size(), false);
    return std::make_shared<const text::grammar::TokenVocabulary>(std::move(tokens), std::move(excluded), eos);
  }();
  return vocab;
}

// Grammars past this many byte-level symbols are too slow to walk many times a second; the compilers' own
// correctness on them (no crash, an EBNF that parses) is still checked.
inline constexpr size_t kMaxWalkSymbols = 4000;

struct Walk {
  std::string text;
  bool ended = false;  // eos accepted
};

// Walks `grammar` for up to max_steps tokens, choosing with `seed`; checks the properties above (aborting on a
// violation) and returns what was produced.
inline Walk random_walk(const std::shared_ptr<const text::grammar::CompiledGrammar>& grammar, uint32_t seed,
                        int max_steps, const char* target) {
  using text::grammar::GrammarMatcher;
  const text::grammar::TokenVocabulary& vocab = grammar->vocabulary();
  GrammarMatcher m(grammar);
  std::vector<uint32_t> fast(vocab.mask_words()), brute(vocab.mask_words());
  Walk walk;
  uint32_t state = seed * 2654435761u + 1;
  // Highly ambiguous grammars (a star repeated {0,15} times) make every Earley step slow, and the brute-force mask
  // tries every token: the walk stops after a time budget, keeping libFuzzer's timeout for real hangs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  for (int step = 0; step < max_steps && std::chrono::steady_clock::now() < deadline; ++step) {
    m.fill_mask(fast.data());
    std::fill(brute.begin(), brute.end(), 0u);
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (m.accept_token(id)) {
        brute[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
        m.rollback(1);
      }
      if ((fast[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) allowed.push_back(id);
    }
    require(fast == brute, target, "the cached mask equals the brute-force mask");
    const bool eos_allowed = (fast[static_cast<size_t>(*vocab.eos_id()) / 32] >> (*vocab.eos_id() % 32)) & 1;
    require(eos_allowed == m.can_end(), target, "eos is allowed exactly when the matcher can end");
    // A grammar whose every rule can finish never strands the matcher: something is always allowed.
    require(!allowed.empty(), target, "a live matcher allows some token");
    state = state * 1103515245u + 12345u;
    // Prefer ending after a while, so that long walks still check whole sentences.
    const bool stop = eos_allowed && (step >= max_steps / 2 || (state >> 16) % 8 == 0);
    const int32_t id = stop ? *vocab.eos_id() : allowed[(state >> 16) % allowed.size()];
    require(m.accept_token(id), target, "an allowed token is accepted");
    if (id == *vocab.eos_id()) {
      walk.ended = true;
      break;
    }
    walk.text += vocab.bytes(id);
  }
  if (walk.ended) {
    GrammarMatcher fresh(grammar);
    require(fresh.accept_bytes(walk.text) && fresh.can_end(), target, "a finished walk is a sentence");
  }
  return walk;
}

}  // namespace strata::fuzz
