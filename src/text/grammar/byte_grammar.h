#pragma once
// The grammar lowered to bytes, the form the Earley parser (earley.h) runs: rules whose alternatives are flat symbol
// strings over byte-set terminals and rule references. Lowering turns every character class into UTF-8 byte-range
// sequences, every literal into its bytes, and every group, alternation and repetition into an auxiliary rule —
// repetition left-recursive (R ::= ε | R X), which Earley parses in constant work per item rather than the linear
// chain of completions right recursion costs.
//
// All alternatives live in one array, each ending with an End symbol, so an Earley item is just (position,
// origin). A synthetic start rule `start ::= root` makes "the whole input is a sentence" an item like any other.
//
// Lowering also checks what makes a grammar unusable: a rule that can never finish (every alternative needs itself),
// and a root that can only produce the empty string.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "text/grammar/grammar.h"

namespace strata::text::grammar {

// A set of bytes, one bit each.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t first, uint8_t last) {
    for (int b = first; b <= last; ++b) set(static_cast<uint8_t>(b));
  }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
    return *this;
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

struct Symbol {
  enum class Kind : uint8_t { kTerminal, kRule, kEnd };
  Kind kind = Kind::kEnd;
  uint32_t id = 0;  // kTerminal: index into ByteGrammar::terminals; kRule / kEnd: rule index
};

struct ByteRule {
  std::string name;                 // the source rule's name, or "<aux>" + a hint for lowered groups
  std::vector<uint32_t> alt_starts; // positions in ByteGrammar::symbols
  bool nullable = false;            // can derive the empty string
  std::vector<uint32_t> references; // positions whose symbol is this rule
  // The one position that refers to this rule from outside its own left recursion, or kNoParent: when a rule is used
  // in exactly one place (every lowered group and repetition), the item that continues after it is known statically,
  // which lets token masks be precomputed past the rule's end (token_mask.h).
  uint32_t unique_parent = UINT32_MAX;
  ByteSet follow;                   // bytes that can come right after the rule completes
};

inline constexpr uint32_t kNoParent = UINT32_MAX;

class ByteGrammar {
 public:
  // Lowers `grammar`; throws GrammarError for an unusable grammar.
  static ByteGrammar lower(const Grammar& grammar);

  const std::vector<Symbol>& symbols() const { return symbols_; }
  const std::vector<ByteRule>& rules() const { return rules_; }
  const std::vector<ByteSet>& terminals() const { return terminals_; }
  uint32_t start_rule() const { return start_rule_; }
  uint32_t rule_of(uint32_t pos) const { return rule_of_[pos]; }
  bool is_alt_start(uint32_t pos) const { return alt_start_[pos]; }

 private:
  std::vector<Symbol> symbols_;
  std::vector<uint32_t> rule_of_;
  std::vector<bool> alt_start_;
  std::vector<ByteRule> rules_;
  std::vector<ByteSet> terminals_;
  uint32_t start_rule_ = 0;

  friend class Lowering;
};

}  // namespace strata::text::grammar
