#pragma once
// One request's position in a compiled grammar: consume tokens, roll them back, and fill the allowed-token bitmask
// for the next sampling step. Not thread-safe (one per sequence); the CompiledGrammar it holds is shared.
//
//   auto grammar = CompiledGrammar::from_ebnf(text, vocab);   // once per grammar, cached
//   GrammarMatcher m(grammar);
//   m.fill_mask(words);                 // words: vocab.mask_words() uint32_t, bit (id % 32) of word id / 32
//   if (!m.accept_token(sampled)) ...   // a token the mask did not allow: rejected, state unchanged
//   m.rollback(k);                      // undo the last k accepted tokens (speculative decoding)
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "text/grammar/compiled_grammar.h"
#include "text/grammar/earley.h"

namespace strata::text::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Consumes a token: true if the grammar allows it (its bytes extend a valid prefix; the eos id when the output so
  // far is complete). False changes nothing.
  bool accept_token(int32_t id);
  // Consumes raw bytes as one step (forced text, tests). All or nothing, like accept_token.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted steps (tokens or byte strings); n larger than the history is an error.
  void rollback(int n);
  void reset();

  // Writes ceil(vocab/32) words: bit set = the token may come next. Special and added tokens are never set; eos is
  // set exactly when can_end(). After termination every bit is clear.
  void fill_mask(uint32_t* words);

  // The output so far is a complete sentence of the grammar (eos would be accepted).
  bool can_end() const { return !terminated_ && parser_.accepts_end(); }
  // Eos was accepted: generation under this grammar is over.
  bool is_terminated() const { return terminated_; }
  // Accepted steps that rollback can undo.
  int steps() const { return static_cast<int>(steps_.size()); }

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct Step {
    size_t depth_before = 0;
    bool eos = false;
  };
  bool push_bytes(std::string_view bytes);
  void check_uncertain(const std::vector<int32_t>& ids, uint32_t* words);

  std::shared_ptr<const CompiledGrammar> grammar_;
  EarleyParser parser_;
  std::vector<Step> steps_;
  bool terminated_ = false;
  std::vector<uint32_t> kernel_scratch_;
  std::vector<uint32_t> kernel_seen_;  // per position: the fill_mask call that last listed it
  uint32_t fill_serial_ = 0;
};

}  // namespace strata::text::grammar
