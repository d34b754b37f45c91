#include "text/grammar/byte_grammar.h"

#include <map>

#include "text/grammar/ebnf_parser.h"
#include "text/grammar/utf8_ranges.h"

namespace strata::text::grammar {

using Alternative = std::vector<Symbol>;

class Lowering {
 public:
  explicit Lowering(const Grammar& g) : g_(g) {}

  ByteGrammar run() {
    const auto n = static_cast<uint32_t>(g_.rules.size());
    alts_.resize(n);
    names_.resize(n);
    for (uint32_t r = 0; r < n; ++r) names_[r] = g_.rules[r].name;
    for (uint32_t r = 0; r < n; ++r) {
      owner_ = g_.rules[r].name;
      alts_[r] = alternatives_of(g_.rules[r].body);
    }
    const uint32_t start = new_rule("<start>");
    alts_[start] = {{Symbol{Symbol::Kind::kRule, g_.root}}};
    check_and_prune(start);
    return flatten(start);
  }

 private:
  uint32_t new_rule(std::string name) {
    alts_.emplace_back();
    names_.push_back(std::move(name));
    return static_cast<uint32_t>(alts_.size() - 1);
  }

  uint32_t aux_rule(std::vector<Alternative> alternatives) {
    const uint32_t r = new_rule(owner_ + "/" + std::to_string(alts_.size()));
    alts_[r] = std::move(alternatives);
    return r;
  }

  uint32_t terminal(const ByteSet& set) {
    const auto it = terminal_ids_.find(set.bits);
    if (it != terminal_ids_.end()) return it->second;
    terminals_.push_back(set);
    const auto id = static_cast<uint32_t>(terminals_.size() - 1);
    terminal_ids_.emplace(set.bits, id);
    return id;
  }

  Symbol byte_range(uint8_t first, uint8_t last) {
    ByteSet set;
    set.set_range(first, last);
    return {Symbol::Kind::kTerminal, terminal(set)};
  }

  std::vector<Alternative> alternatives_of(uint32_t expr) {
    const Expr& e = g_.exprs[expr];
    if (e.kind != Expr::Kind::kChoice) {
      Alternative a;
      lower_into(expr, a);
      return {std::move(a)};
    }
    std::vector<Alternative> out;
    for (uint32_t child : e.children) {
      Alternative a;
      lower_into(child, a);
      out.push_back(std::move(a));
    }
    return out;
  }

  // One symbol standing for expr (an auxiliary rule when it takes more than one).
  Symbol symbol_for(uint32_t expr) {
    Alternative a;
    lower_into(expr, a);
    if (a.size() == 1) return a[0];
    return {Symbol::Kind::kRule, aux_rule({std::move(a)})};
  }

  void lower_class(const Expr& e, Alternative& out) {
    const std::vector<Utf8Sequence> sequences = utf8_sequences(e.ranges);
    bool single_bytes = true;
    for (const Utf8Sequence& s : sequences) single_bytes = single_bytes && s.size() == 1;
    if (single_bytes) {  // also the empty class: an empty terminal, pruned as unproductive
      ByteSet set;
      for (const Utf8Sequence& s : sequences) set.set_range(s[0].first, s[0].last);
      out.push_back({Symbol::Kind::kTerminal, terminal(set)});
      return;
    }
    if (sequences.size() == 1) {
      for (const ByteRange& b : sequences[0]) out.push_back(byte_range(b.first, b.last));
      return;
    }
    std::vector<std::pair<uint32_t, uint32_t>> key;
    for (const CodepointRange& r : e.ranges) key.emplace_back(r.first, r.last);
    auto it = class_rules_.find(key);
    if (it == class_rules_.end()) {
      std::vector<Alternative> alternatives;
      ByteSet ascii;  // one-byte shapes share one terminal
      for (const Utf8Sequence& s : sequences) {
        if (s.size() == 1) {
          ascii.set_range(s[0].first, s[0].last);
          continue;
        }
        Alternative a;
        for (const ByteRange& b : s) a.push_back(byte_range(b.first, b.last));
        alternatives.push_back(std::move(a));
      }
      if (!ascii.empty()) alternatives.push_back({{Symbol::Kind::kTerminal, terminal(ascii)}});
      const uint32_t r = new_rule("<class>");
      alts_[r] = std::move(alternatives);
      it = class_rules_.emplace(key, r).first;
    }
    out.push_back({Symbol::Kind::kRule, it->second});
  }

  void lower_into(uint32_t expr, Alternative& out) {
    const Expr& e = g_.exprs[expr];
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        return;
      case Expr::Kind::kLiteral:
        for (const char c : e.text) out.push_back(byte_range(static_cast<uint8_t>(c), static_cast<uint8_t>(c)));
        return;
      case Expr::Kind::kCharClass:
        lower_class(e, out);
        return;
      case Expr::Kind::kRuleRef:
        out.push_back({Symbol::Kind::kRule, e.rule});
        return;
      case Expr::Kind::kSequence:
        for (uint32_t child : e.children) lower_into(child, out);
        return;
      case Expr::Kind::kChoice:
        out.push_back({Symbol::Kind::kRule, aux_rule(alternatives_of(expr))});
        return;
      case Expr::Kind::kRepeat: {
        const Symbol x = symbol_for(e.children[0]);
        for (int32_t i = 0; i < e.min_repeat; ++i) out.push_back(x);
        if (e.max_repeat == kUnbounded) {
          const uint32_t r = aux_rule({});
          alts_[r] = {{}, {Symbol{Symbol::Kind::kRule, r}, x}};  // R ::= ε | R X
          out.push_back({Symbol::Kind::kRule, r});
        } else if (e.max_repeat > e.min_repeat) {
          // T1 ::= ε | X;  Tk ::= ε | X T(k-1): at most max - min more, in size linear in the bound.
          uint32_t tail = aux_rule({{}, {x}});
          for (int32_t k = 2; k <= e.max_repeat - e.min_repeat; ++k) {
            tail = aux_rule({{}, {x, Symbol{Symbol::Kind::kRule, tail}}});
          }
          out.push_back({Symbol::Kind::kRule, tail});
        }
        return;
      }
    }
  }

  bool symbol_productive(const Symbol& s, const std::vector<bool>& productive) const {
    if (s.kind == Symbol::Kind::kTerminal) return !terminals_[s.id].empty();
    return productive[s.id];
  }

  // Drops alternatives that can never finish (they would let a mask allow a dead end), then refuses a grammar whose
  // used rules can never finish or whose root only produces the empty string.
  void check_and_prune(uint32_t start) {
    const size_t n = alts_.size();
    std::vector<bool> productive(n, false), nonempty(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        for (const Alternative& a : alts_[r]) {
          bool ok = true, some = false;
          for (const Symbol& s : a) {
            ok = ok && symbol_productive(s, productive);
            some = some || s.kind == Symbol::Kind::kTerminal || (s.kind == Symbol::Kind::kRule && nonempty[s.id]);
          }
          if (ok && !productive[r]) productive[r] = changed = true;
          if (ok && some && !nonempty[r]) nonempty[r] = changed = true;
        }
      }
    }
    // Rules used from the root, in the order they are found, for a message naming the first bad one.
    std::vector<bool> seen(n, false);
    std::vector<uint32_t> order{start};
    seen[start] = true;
    for (size_t i = 0; i < order.size(); ++i) {
      for (const Alternative& a : alts_[order[i]]) {
        for (const Symbol& s : a) {
          if (s.kind == Symbol::Kind::kRule && !seen[s.id]) {
            seen[s.id] = true;
            order.push_back(s.id);
          }
        }
      }
    }
    // The deepest rule that cannot finish is the cause; the rules above it only inherit the problem.
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const uint32_t r = *it;
      if (!productive[r]) {
        const std::string& name = names_[r];
        if (r < g_.rules.size()) {
          throw GrammarError(cat("grammar: rule '", name, "' can never finish: every alternative needs a rule that "
                                 "never finishes (itself, without a way out) or an empty character class"), 0, 0);
        }
        throw GrammarError(cat("grammar: a part of rule '", name.substr(0, name.find('/')),
                               "' can never match (an empty character class, or a repetition of one)"), 0, 0);
      }
    }
    if (!nonempty[g_.root]) {
      throw GrammarError(cat("grammar: the root rule '", g_.rules[g_.root].name,
                             "' can only produce the empty string"), 0, 0);
    }
    for (auto& alternatives : alts_) {
      std::erase_if(alternatives, [&](const Alternative& a) {
        for (const Symbol& s : a) {
          if (!symbol_productive(s, productive)) return true;
        }
        return false;
      });
    }
  }

  ByteGrammar flatten(uint32_t start) {
    ByteGrammar out;
    const size_t n = alts_.size();
    out.rules_.resize(n);
    for (uint32_t r = 0; r < n; ++r) {
      out.rules_[r].name = names_[r];
      for (const Alternative& a : alts_[r]) {
        out.rules_[r].alt_starts.push_back(static_cast<uint32_t>(out.symbols_.size()));
        for (size_t i = 0; i < a.size(); ++i) {
          out.symbols_.push_back(a[i]);
          out.rule_of_.push_back(r);
          out.alt_start_.push_back(i == 0);
        }
        out.symbols_.push_back({Symbol::Kind::kEnd, r});
        out.rule_of_.push_back(r);
        out.alt_start_.push_back(a.empty());
      }
    }
    out.terminals_ = terminals_;
    out.start_rule_ = start;
    analyse(out);
    return out;
  }

  // Nullable, references, unique parents, FIRST and FOLLOW byte sets.
  static void analyse(ByteGrammar& g) {
    auto& rules = g.rules_;
    const auto& symbols = g.symbols_;
    const size_t n = rules.size();
    for (bool changed = true; changed;) {
      changed = false;
      for (auto& rule : rules) {
        if (rule.nullable) continue;
        for (uint32_t p : rule.alt_starts) {
          while (symbols[p].kind == Symbol::Kind::kRule && rules[symbols[p].id].nullable) ++p;
          if (symbols[p].kind == Symbol::Kind::kEnd) {
            rule.nullable = changed = true;
            break;
          }
        }
      }
    }
    for (uint32_t p = 0; p < symbols.size(); ++p) {
      if (symbols[p].kind != Symbol::Kind::kRule) continue;
      const uint32_t r = symbols[p].id;
      rules[r].references.push_back(p);
    }
    for (uint32_t r = 0; r < n; ++r) {
      uint32_t outside = kNoParent;
      int count = 0;
      for (uint32_t p : rules[r].references) {
        if (g.rule_of_[p] == r && g.alt_start_[p]) continue;  // R ::= R X: its own left recursion
        outside = p;
        ++count;
      }
      rules[r].unique_parent = count == 1 ? outside : kNoParent;
    }
    // FIRST of the symbol string starting at p (and whether it is nullable).
    std::vector<ByteSet> first(n);
    auto first_from = [&](uint32_t p, ByteSet& set) {
      for (;; ++p) {
        const Symbol& s = symbols[p];
        if (s.kind == Symbol::Kind::kEnd) return true;
        if (s.kind == Symbol::Kind::kTerminal) {
          set |= g.terminals_[s.id];
          return false;
        }
        set |= first[s.id];
        if (!rules[s.id].nullable) return false;
      }
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < n; ++r) {
        ByteSet set = first[r];
        for (uint32_t p : rules[r].alt_starts) first_from(p, set);
        if (!(set == first[r])) {
          first[r] = set;
          changed = true;
        }
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t p = 0; p < symbols.size(); ++p) {
        if (symbols[p].kind != Symbol::Kind::kRule) continue;
        ByteSet set = rules[symbols[p].id].follow;
        if (first_from(p + 1, set)) set |= rules[g.rule_of_[p]].follow;
        if (!(set == rules[symbols[p].id].follow)) {
          rules[symbols[p].id].follow = set;
          changed = true;
        }
      }
    }
  }

  const Grammar& g_;
  std::string owner_;
  std::vector<std::vector<Alternative>> alts_;
  std::vector<std::string> names_;
  std::vector<ByteSet> terminals_;
  std::map<std::array<uint64_t, 4>, uint32_t> terminal_ids_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> class_rules_;
};

ByteGrammar ByteGrammar::lower(const Grammar& grammar) { return Lowering(grammar).run(); }

}  // namespace strata::text::grammar
