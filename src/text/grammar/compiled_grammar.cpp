#include "text/grammar/compiled_grammar.h"

#include "text/grammar/ebnf_parser.h"

namespace strata::text::grammar {

CompiledGrammar::CompiledGrammar(ByteGrammar byte_grammar, std::shared_ptr<const TokenVocabulary> vocab,
                                 std::string ebnf)
    : byte_grammar_(std::move(byte_grammar)), vocab_(std::move(vocab)), ebnf_(std::move(ebnf)) {
  const size_t n = byte_grammar_.symbols().size();
  once_ = std::make_unique<std::once_flag[]>(n);
  masks_.resize(n);
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::compile(const Grammar& grammar,
                                                                std::shared_ptr<const TokenVocabulary> vocab) {
  return std::make_shared<const CompiledGrammar>(ByteGrammar::lower(grammar), std::move(vocab), to_ebnf(grammar));
}

std::shared_ptr<const CompiledGrammar> CompiledGrammar::from_ebnf(std::string_view ebnf,
                                                                  std::shared_ptr<const TokenVocabulary> vocab) {
  return compile(parse_ebnf(ebnf), std::move(vocab));
}

bool CompiledGrammar::is_kernel(uint32_t pos) const {
  const ByteGrammar& g = byte_grammar_;
  if (g.symbols()[pos].kind == Symbol::Kind::kEnd) return false;
  return !g.is_alt_start(pos) || g.rule_of(pos) == g.start_rule();
}

const PositionMask& CompiledGrammar::position_mask(uint32_t pos) const {
  std::call_once(once_[pos], [&] {
    masks_[pos] = std::make_unique<PositionMask>(compute_position_mask(byte_grammar_, *vocab_, pos));
  });
  return *masks_[pos];
}

void CompiledGrammar::precompute_all() const {
  for (uint32_t pos = 0; pos < byte_grammar_.symbols().size(); ++pos) {
    if (is_kernel(pos)) position_mask(pos);
  }
}

}  // namespace strata::text::grammar
