#pragma once
// A byte-level Earley recognizer over a ByteGrammar, kept as a stack of Earley sets (one per byte consumed) so that
// consuming is push and rollback is pop: the token-mask walk tries a token's bytes and backs out of them, and a
// matcher rolls back whole tokens for speculative decoding.
//
// Earley handles every context-free grammar (left recursion, ambiguity, ε-rules) in one loop; nullable rules use
// Aycock & Horspool's rule (predicting a nullable rule also steps over it), so no set ever completes a rule that
// started in itself. An item is (position in ByteGrammar::symbols, origin set).
//
// The isolated mode serves mask precomputation: the sets below the start are "virtual" — they stand for the sets
// where the item and its statically known parents began (only what the grammar guarantees is there), and a rule
// that completes against a virtual set with possibly unknown waiters is an exit: the parse continues in a context
// the cache cannot see, so the token is decided at runtime (token_mask.h).
#include <cstdint>
#include <span>
#include <vector>

#include "text/grammar/byte_grammar.h"

namespace strata::text::grammar {

struct EarleyItem {
  uint32_t pos = 0;
  uint32_t origin = 0;
};

class EarleyParser {
 public:
  explicit EarleyParser(const ByteGrammar& grammar);

  // One set: the closure of `<start> ::= . root`.
  void start();
  // Virtual sets for the item at `pos` and up to max_parents statically known parents, then a set holding the item.
  void start_isolated(uint32_t pos, int max_parents);

  // Consumes one byte: pushes a set and returns true, or returns false and changes nothing when no item scans it.
  bool advance(uint8_t byte);
  // Drops the top set (never the first real one).
  void pop();
  // Sets above the virtual ones: 1 + bytes consumed since start.
  size_t depth() const { return set_begin_.size() - virtual_sets_; }

  // The start rule is complete in the top set: the bytes so far are a whole sentence.
  bool accepts_end() const;
  std::span<const EarleyItem> top() const {
    return {items_.data() + set_begin_.back(), items_.size() - set_begin_.back()};
  }
  // Isolated mode: bytes that may follow a rule that completed in the top set against a virtual set whose waiters
  // are not all known.
  const ByteSet& exit_follow() const { return exit_follow_.back(); }
  // The bytes some item of the top set can scan next.
  ByteSet next_bytes() const;

  const ByteGrammar& grammar() const { return g_; }

 private:
  void add(uint32_t pos, uint32_t origin);
  void predict(uint32_t rule, uint32_t set);
  void close(uint32_t set);  // prediction and completion over the items of the top set
  void push_set();
  bool in_set(uint32_t set, uint32_t pos) const;

  const ByteGrammar& g_;
  std::vector<EarleyItem> items_;
  std::vector<uint32_t> set_begin_;
  std::vector<ByteSet> exit_follow_;
  uint32_t virtual_sets_ = 0;
  uint32_t start_end_pos_ = 0;  // the End of `<start> ::= root`

  // Per-set deduplication, reset by bumping the serial instead of clearing.
  std::vector<uint32_t> predicted_serial_;  // per rule
  std::vector<uint64_t> seen_keys_;
  std::vector<uint32_t> seen_serial_;
  uint32_t serial_ = 0;       // stamps predicted_serial_
  uint32_t table_epoch_ = 0;  // stamps seen_serial_ (also bumped when the table grows)
  uint32_t seen_count_ = 0;
};

}  // namespace strata::text::grammar
