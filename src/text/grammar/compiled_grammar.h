#pragma once
// A grammar compiled against one vocabulary: immutable after construction and safe to share between requests and
// threads (cache it per grammar text / schema). The per-position token masks (token_mask.h) are computed the first
// time a matcher needs them and kept; that lazy fill is internally synchronized, so the object stays logically const.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "text/grammar/byte_grammar.h"
#include "text/grammar/grammar.h"
#include "text/grammar/token_mask.h"
#include "text/grammar/token_vocabulary.h"

namespace strata::text::grammar {

class CompiledGrammar {
 public:
  // Throws GrammarError for an unusable grammar.
  static std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar,
                                                        std::shared_ptr<const TokenVocabulary> vocab);
  // EBNF text (ebnf_parser.h), root rule "root".
  static std::shared_ptr<const CompiledGrammar> from_ebnf(std::string_view ebnf,
                                                          std::shared_ptr<const TokenVocabulary> vocab);

  const ByteGrammar& byte_grammar() const { return byte_grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }
  const std::string& ebnf() const { return ebnf_; }

  // The mask cache entry of kernel position pos (computed on first use).
  const PositionMask& position_mask(uint32_t pos) const;
  // Computes every kernel position's entry now (compile time instead of first-use time).
  void precompute_all() const;
  // Kernel positions: symbol positions that are not the start of an alternative (plus the start rule's), and not
  // an End.
  bool is_kernel(uint32_t pos) const;

  CompiledGrammar(ByteGrammar byte_grammar, std::shared_ptr<const TokenVocabulary> vocab, std::string ebnf);

 private:
  ByteGrammar byte_grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::string ebnf_;
  mutable std::unique_ptr<std::once_flag[]> once_;
  mutable std::vector<std::unique_ptr<PositionMask>> masks_;
};

}  // namespace strata::text::grammar
