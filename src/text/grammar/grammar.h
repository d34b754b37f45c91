#pragma once
// The grammar IR: what the EBNF parser, the regex converter and the JSON-Schema converter produce, and what the
// byte-level compiler (byte_grammar.h) lowers. A grammar is a set of named rules whose bodies are expression trees
// over Unicode text: literals, character classes, rule references, sequences, alternations and bounded or
// unbounded repetition. Everything here is still character-level; bytes appear only after lowering.
#include <cstdint>
#include <string>
#include <vector>

namespace strata::text::grammar {

// A closed range of Unicode code points.
struct CodepointRange {
  uint32_t first = 0;
  uint32_t last = 0;
};

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;
inline constexpr int32_t kUnbounded = -1;  // Expr::max_repeat for `*`, `+` and `{m,}`

struct Expr {
  enum class Kind : uint8_t {
    kEmpty,      // ""  (matches nothing, i.e. the empty string)
    kLiteral,    // text: UTF-8 bytes matched exactly
    kCharClass,  // ranges (sorted, disjoint, already complemented when the source said [^...]): one code point
    kRuleRef,    // rule: index into Grammar::rules
    kSequence,   // children, in order
    kChoice,     // children, any one
    kRepeat,     // children[0], between min_repeat and max_repeat times (max kUnbounded: no limit)
  };
  Kind kind = Kind::kEmpty;
  std::string text;
  std::vector<CodepointRange> ranges;
  uint32_t rule = 0;
  std::vector<uint32_t> children;  // indices into Grammar::exprs
  int32_t min_repeat = 0;
  int32_t max_repeat = 0;
};

struct Rule {
  std::string name;
  uint32_t body = 0;  // index into Grammar::exprs
};

// A grammar whose expressions live in one arena. Rule references are by index, so rules can be recursive.
struct Grammar {
  std::vector<Expr> exprs;
  std::vector<Rule> rules;
  uint32_t root = 0;  // index into rules

  uint32_t add(Expr e) {
    exprs.push_back(std::move(e));
    return static_cast<uint32_t>(exprs.size() - 1);
  }
  uint32_t literal(std::string text);
  uint32_t char_class(std::vector<CodepointRange> ranges, bool negated);
  uint32_t rule_ref(uint32_t rule);
  uint32_t sequence(std::vector<uint32_t> children);
  uint32_t choice(std::vector<uint32_t> children);
  uint32_t repeat(uint32_t child, int32_t min_repeat, int32_t max_repeat);
};

// Sorts and merges ranges; with negate, returns the complement within [0, kMaxCodepoint].
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negate);

// The grammar in the EBNF dialect ebnf_parser.h reads (for error messages, debugging and tests): parsing the
// output again gives an equivalent grammar.
std::string to_ebnf(const Grammar& grammar);

// Appends code point cp as UTF-8 (cp must be <= kMaxCodepoint).
void append_utf8(uint32_t cp, std::string& out);

}  // namespace strata::text::grammar
