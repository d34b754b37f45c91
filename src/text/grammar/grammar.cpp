#include "text/grammar/grammar.h"

#include <algorithm>
#include <cstdio>

namespace strata::text::grammar {

uint32_t Grammar::literal(std::string text) {
  Expr e;
  e.kind = text.empty() ? Expr::Kind::kEmpty : Expr::Kind::kLiteral;
  e.text = std::move(text);
  return add(std::move(e));
}

uint32_t Grammar::char_class(std::vector<CodepointRange> ranges, bool negated) {
  Expr e;
  e.kind = Expr::Kind::kCharClass;
  e.ranges = normalize_ranges(std::move(ranges), negated);
  return add(std::move(e));
}

uint32_t Grammar::rule_ref(uint32_t rule) {
  Expr e;
  e.kind = Expr::Kind::kRuleRef;
  e.rule = rule;
  return add(std::move(e));
}

uint32_t Grammar::sequence(std::vector<uint32_t> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = children.empty() ? Expr::Kind::kEmpty : Expr::Kind::kSequence;
  e.children = std::move(children);
  return add(std::move(e));
}

uint32_t Grammar::choice(std::vector<uint32_t> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = Expr::Kind::kChoice;
  e.children = std::move(children);
  return add(std::move(e));
}

uint32_t Grammar::repeat(uint32_t child, int32_t min_repeat, int32_t max_repeat) {
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.children = {child};
  e.min_repeat = min_repeat;
  e.max_repeat = max_repeat;
  return add(std::move(e));
}

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodepointRange& a, const CodepointRange& b) { return a.first < b.first; });
  std::vector<CodepointRange> merged;
  for (const CodepointRange& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().last + 1) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  if (!negate) return merged;
  std::vector<CodepointRange> complement;
  uint32_t next = 0;
  for (const CodepointRange& r : merged) {
    if (r.first > next) complement.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  if (next <= kMaxCodepoint) complement.push_back({next, kMaxCodepoint});
  return complement;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Printable ASCII stays as is; everything else is escaped so the output is plain ASCII and unambiguous.
void append_escaped(uint32_t cp, bool in_class, std::string& out) {
  const bool special = cp == '\\' || (in_class ? (cp == ']' || cp == '-' || cp == '^' || cp == '[') : cp == '"');
  if (special) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (cp >= 0x20 && cp < 0x7F) {
    out += static_cast<char>(cp);
  } else {
    char buf[16];
    if (cp <= 0xFF) {
      std::snprintf(buf, sizeof buf, "\\x%02X", cp);
    } else if (cp <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04X", cp);
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08X", cp);
    }
    out += buf;
  }
}

// Decodes one code point of well-formed UTF-8 (literals are built from UTF-8 the parser produced).
uint32_t next_codepoint(const std::string& s, size_t& i) {
  const auto b = static_cast<uint8_t>(s[i]);
  int extra = b < 0x80 ? 0 : b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
  uint32_t cp = extra == 0 ? b : extra == 1 ? (b & 0x1F) : extra == 2 ? (b & 0x0F) : (b & 0x07);
  ++i;
  for (; extra > 0 && i < s.size(); --extra, ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[i]) & 0x3F);
  return cp;
}

void print_expr(const Grammar& g, uint32_t id, std::string& out) {
  const Expr& e = g.exprs[id];
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      out += "\"\"";
      break;
    case Expr::Kind::kLiteral: {
      out += '"';
      for (size_t i = 0; i < e.text.size();) append_escaped(next_codepoint(e.text, i), false, out);
      out += '"';
      break;
    }
    case Expr::Kind::kCharClass:
      out += '[';
      for (const CodepointRange& r : e.ranges) {
        append_escaped(r.first, true, out);
        if (r.last != r.first) {
          out += '-';
          append_escaped(r.last, true, out);
        }
      }
      out += ']';
      break;
    case Expr::Kind::kRuleRef:
      out += g.rules[e.rule].name;
      break;
    case Expr::Kind::kSequence:
    case Expr::Kind::kChoice:
      out += '(';
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i > 0) out += e.kind == Expr::Kind::kChoice ? " | " : " ";
        print_expr(g, e.children[i], out);
      }
      out += ')';
      break;
    case Expr::Kind::kRepeat:
      out += '(';
      print_expr(g, e.children[0], out);
      out += "){" + std::to_string(e.min_repeat) + ",";
      if (e.max_repeat != kUnbounded) out += std::to_string(e.max_repeat);
      out += '}';
      break;
  }
}

}  // namespace

std::string to_ebnf(const Grammar& grammar) {
  std::string out;
  for (const Rule& rule : grammar.rules) {
    out += rule.name + " ::= ";
    print_expr(grammar, rule.body, out);
    out += '\n';
  }
  return out;
}

}  // namespace strata::text::grammar
