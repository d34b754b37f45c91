#include "text/grammar/regex_to_grammar.h"

#include <cstdio>
#include <optional>

#include "text/grammar/ebnf_parser.h"
#include "text/grammar/grammar.h"
#include "text/grammar/utf8_ranges.h"

namespace strata::text::grammar {
namespace {

constexpr int32_t kMaxRegexRepeat = 1024;  // the EBNF parser's bound, checked here to report the regex column
// Groups nest by recursion (here and in every later pass over the expression): a bound keeps a hostile pattern
// from overflowing the stack of the thread that compiles it. Each level writes at most three EBNF parentheses
// (group, alternation, quantifier), well inside the EBNF parser's bound of 1000.
constexpr int kMaxRegexNesting = 200;

using Ranges = std::vector<CodepointRange>;

Ranges digit_ranges() { return {{'0', '9'}}; }
Ranges word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges space_ranges() {  // ECMA-262 WhiteSpace and LineTerminator
  return {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
          {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

std::string hex_escape(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  return buf;
}

// A code point as an EBNF literal's content.
std::string literal_char(uint32_t cp) {
  if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') || cp == ' ') {
    return std::string(1, static_cast<char>(cp));
  }
  return hex_escape(cp);
}

std::string class_text(const Ranges& ranges) {
  std::string out = "[";
  for (const CodepointRange& r : ranges) {
    out += hex_escape(r.first);
    if (r.last != r.first) out += "-" + hex_escape(r.last);
  }
  return out + "]";
}

// The JSON escape that stands for code point cp inside a string (`"`, `\` and controls must be escaped).
std::string json_escape_literal(uint32_t cp) {
  switch (cp) {
    case '"': return "\"\\\\\\\"\"";   // the two bytes \"
    case '\\': return "\"\\\\\\\\\"";  // the two bytes \\ .
    case '\b': return "\"\\\\b\"";
    case '\f': return "\"\\\\f\"";
    case '\n': return "\"\\\\n\"";
    case '\r': return "\"\\\\r\"";
    case '\t': return "\"\\\\t\"";
    default: {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%04x", cp);
      return std::string("\"\\\\u") + buf + "\"";
    }
  }
}

bool needs_json_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

// A set of code points as an EBNF expression; in a JSON string, the characters that must be escaped become their
// escapes.
std::string ranges_expr(const Ranges& ranges, bool json_string) {
  if (!json_string) return class_text(ranges);
  Ranges safe;
  std::vector<std::string> escapes;
  for (const CodepointRange& r : ranges) {
    for (uint32_t cp = r.first; cp <= r.last && cp < 0x60; ++cp) {
      if (needs_json_escape(cp)) escapes.push_back(json_escape_literal(cp));
    }
  }
  safe = normalize_ranges(ranges, false);
  Ranges cut;
  for (const CodepointRange& r : safe) {  // remove 0x00-0x1F, '"', '\'
    uint32_t first = r.first;
    const uint32_t last = r.last;
    auto emit = [&](uint32_t a, uint32_t b) {
      if (a <= b) cut.push_back({a, b});
    };
    if (first < 0x20) first = 0x20;
    if (first > last) continue;
    uint32_t start = first;
    for (uint32_t bad : {uint32_t{'"'}, uint32_t{'\\'}}) {
      if (bad >= start && bad <= last) {
        if (bad > start) emit(start, bad - 1);
        start = bad + 1;
      }
    }
    emit(start, last);
  }
  std::string out;
  if (!cut.empty()) out = class_text(cut);
  for (const std::string& e : escapes) out += (out.empty() ? "" : " | ") + e;
  if (out.empty()) return "";
  return escapes.empty() ? out : "(" + out + ")";
}

constexpr const char* kJsonStringChar = R"(([^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})))";

class RegexParser {
 public:
  RegexParser(std::string_view re, const RegexOptions& options) : re_(re), options_(options) {}

  std::string parse() {
    bool anchored_start = false, anchored_end = false;
    if (!re_.empty() && re_[0] == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    std::string body = parse_alternation(/*top=*/true);
    if (pos_ < re_.size()) {
      if (re_[pos_] == ')') error("unbalanced ')': no group is open");
      if (re_[pos_] == '$') {
        anchored_end = true;
        ++pos_;
      }
      if (pos_ < re_.size()) error("'$' is supported only at the end of the pattern");
    }
    if (top_level_alternation_ && (anchored_start || anchored_end)) {
      error_at(0, "an anchor with a top-level '|' is ambiguous here: write ^(a|b)$");
    }
    if (body.empty()) body = "\"\"";
    if (!options_.search) return body;
    const std::string any = options_.json_string ? std::string(kJsonStringChar) + "*" : "[\\U00000000-\\U0010FFFF]*";
    return (anchored_start ? "" : any + " ") + "(" + body + ")" + (anchored_end ? "" : " " + any);
  }

 private:
  [[noreturn]] void error_at(size_t pos, const std::string& message) const {
    throw GrammarError(cat("regex: column ", pos + 1, ": ", message), 1, static_cast<int>(pos + 1));
  }
  [[noreturn]] void error(const std::string& message) const { error_at(pos_, message); }

  std::string parse_alternation(bool top) {
    std::vector<std::string> branches{parse_sequence()};
    while (pos_ < re_.size() && re_[pos_] == '|') {
      ++pos_;
      branches.push_back(parse_sequence());
      if (top) top_level_alternation_ = true;
    }
    if (branches.size() == 1) return branches[0];
    std::string out = "(";
    for (size_t i = 0; i < branches.size(); ++i) {
      out += (i ? " | " : "") + (branches[i].empty() ? std::string("\"\"") : branches[i]);
    }
    return out + ")";
  }

  std::string parse_sequence() {
    std::string out;
    while (pos_ < re_.size() && re_[pos_] != '|' && re_[pos_] != ')') {
      if (re_[pos_] == '$') {
        if (pos_ + 1 == re_.size()) break;
        error("'$' is supported only at the end of the pattern");
      }
      if (re_[pos_] == '^') error("'^' is supported only at the start of the pattern");
      std::string atom = parse_quantified();
      if (atom.empty()) continue;
      out += (out.empty() ? "" : " ") + atom;
    }
    return out;
  }

  std::optional<int32_t> read_int() {
    const size_t start = pos_;
    int64_t v = 0;
    while (pos_ < re_.size() && re_[pos_] >= '0' && re_[pos_] <= '9') {
      v = v * 10 + (re_[pos_++] - '0');
      if (v > kMaxRegexRepeat) error_at(start, cat("repetition bound is over the limit of ", kMaxRegexRepeat));
    }
    if (pos_ == start) return std::nullopt;
    return static_cast<int32_t>(v);
  }

  std::string parse_quantified() {
    const size_t atom_pos = pos_;
    std::string atom = parse_atom();
    while (pos_ < re_.size()) {
      const char c = re_[pos_];
      std::string suffix;
      if (c == '*' || c == '+' || c == '?') {
        suffix = std::string(1, c);
        ++pos_;
      } else if (c == '{') {
        const size_t open = pos_++;
        const std::optional<int32_t> min = read_int();
        if (!min) {  // ECMA (Annex B) reads a '{' that starts no quantifier as a literal
          pos_ = open;
          break;
        }
        std::optional<int32_t> max = min;
        if (pos_ < re_.size() && re_[pos_] == ',') {
          ++pos_;
          max = read_int();
        }
        if (pos_ >= re_.size() || re_[pos_] != '}') error_at(open, "a repetition {m,n} is not closed by '}'");
        ++pos_;
        if (max && *max < *min) error_at(open, cat("repetition {", *min, ",", *max, "}: the maximum is below the minimum"));
        suffix = "{" + std::to_string(*min) + (max == min ? "" : "," + (max ? std::to_string(*max) : "")) + "}";
      } else {
        break;
      }
      if (atom.empty()) error_at(atom_pos, "a quantifier needs something to repeat");
      if (pos_ < re_.size() && re_[pos_] == '?') ++pos_;  // lazy: same language
      atom = "(" + atom + ")" + suffix;
      // ECMA-262 repeats an atom, never a quantified one: `a**` and `a{2}{3}` are syntax errors (and `a*+` would be
      // possessive in PCRE, another language).
      if (pos_ < re_.size() && (re_[pos_] == '*' || re_[pos_] == '+' || re_[pos_] == '?' || quantifier_at(pos_))) {
        error("a quantifier cannot follow another quantifier (wrap the first in a group)");
      }
      break;
    }
    return atom;
  }

  // A '{' at `at` that starts a quantifier {m}, {m,} or {m,n} (otherwise ECMA Annex B reads it as a literal).
  bool quantifier_at(size_t at) const {
    if (at >= re_.size() || re_[at] != '{') return false;
    size_t p = at + 1;
    const size_t digits = p;
    while (p < re_.size() && re_[p] >= '0' && re_[p] <= '9') ++p;
    if (p == digits) return false;
    if (p < re_.size() && re_[p] == ',') {
      ++p;
      while (p < re_.size() && re_[p] >= '0' && re_[p] <= '9') ++p;
    }
    return p < re_.size() && re_[p] == '}';
  }

  uint32_t read_hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char h = pos_ < re_.size() ? re_[pos_] : '\0';
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) error(cat("escape needs ", digits, " hex digits"));
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // One code point of the pattern (well-formed UTF-8: a pattern from a request may hold any bytes).
  uint32_t read_char() {
    const std::optional<uint32_t> cp = decode_utf8(re_, pos_);
    if (!cp) error("the pattern is not valid UTF-8");
    return *cp;
  }

  // An escape after '\': a class (\d ...) fills `cls` and returns true; otherwise sets `cp`.
  bool read_escape(Ranges& cls, uint32_t& cp, bool in_class) {
    const size_t at = pos_ - 1;
    if (pos_ >= re_.size()) error_at(at, "the pattern ends inside an escape");
    const char e = re_[pos_++];
    switch (e) {
      case 'd': cls = digit_ranges(); return true;
      case 'w': cls = word_ranges(); return true;
      case 's': cls = space_ranges(); return true;
      case 'D': cls = normalize_ranges(digit_ranges(), true); return true;
      case 'W': cls = normalize_ranges(word_ranges(), true); return true;
      case 'S': cls = normalize_ranges(space_ranges(), true); return true;
      case 'n': cp = '\n'; return false;
      case 'r': cp = '\r'; return false;
      case 't': cp = '\t'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = read_hex(2); return false;
      case 'u':
        if (pos_ < re_.size() && re_[pos_] == '{') error_at(at, "\\u{...} needs the u flag, which patterns do not have");
        cp = read_hex(4);
        if (cp >= 0xD800 && cp <= 0xDFFF) error_at(at, "a UTF-16 surrogate escape is not a character");
        return false;
      case 'b':
        if (in_class) {
          cp = '\b';
          return false;
        }
        error_at(at, "word boundaries (\\b) are not supported");
      case 'B': error_at(at, "word boundaries (\\B) are not supported");
      case 'p': case 'P': error_at(at, "Unicode property escapes (\\p, \\P) are not supported");
      case 'c': error_at(at, "control escapes (\\c) are not supported");
      case 'k': error_at(at, "named backreferences (\\k) are not supported");
      default:
        if (e >= '1' && e <= '9') error_at(at, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) error_at(at, cat("unknown escape '\\", e, "'"));
        --pos_;
        cp = read_char();
        return false;
    }
  }

  std::string parse_class() {
    const size_t open = pos_++;
    bool negated = false;
    if (pos_ < re_.size() && re_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    while (true) {
      if (pos_ >= re_.size()) error_at(open, "character class is not closed by ']'");
      if (re_[pos_] == ']') break;  // ECMA: [] matches nothing, [^] anything
      const size_t item_pos = pos_;
      Ranges cls;
      uint32_t lo = 0;
      bool is_class = false;
      if (re_[pos_] == '\\') {
        ++pos_;
        is_class = read_escape(cls, lo, true);
      } else {
        lo = read_char();
      }
      if (is_class) {
        ranges.insert(ranges.end(), cls.begin(), cls.end());
        continue;
      }
      if (pos_ + 1 < re_.size() && re_[pos_] == '-' && re_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        if (re_[pos_] == '\\') {
          ++pos_;
          if (read_escape(cls, hi, true)) error_at(item_pos, "a class escape cannot end a range");
        } else {
          hi = read_char();
        }
        if (hi < lo) error_at(item_pos, "character range is out of order");
        ranges.push_back({lo, hi});
      } else {
        ranges.push_back({lo, lo});
      }
    }
    ++pos_;
    const Ranges set = normalize_ranges(ranges, negated);
    if (set.empty()) error_at(open, "the character class matches nothing");
    return ranges_expr(set, options_.json_string);
  }

  std::string parse_atom() {
    const size_t at = pos_;
    const char c = re_[pos_];
    if (c == '(') {
      ++pos_;
      if (re_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (re_.substr(pos_, 2) == "?=" || re_.substr(pos_, 2) == "?!" || re_.substr(pos_, 3) == "?<=" ||
                 re_.substr(pos_, 3) == "?<!") {
        error_at(at, "lookaround assertions are not supported");
      } else if (re_.substr(pos_, 2) == "?<") {
        const size_t close = re_.find('>', pos_);
        if (close == std::string_view::npos) error_at(at, "a named group's name is not closed by '>'");
        pos_ = close + 1;
      } else if (pos_ < re_.size() && re_[pos_] == '?') {
        error_at(at, "unknown group modifier '(?'");
      }
      if (++depth_ > kMaxRegexNesting) error_at(at, cat("groups nest deeper than ", kMaxRegexNesting, " levels"));
      std::string inner = parse_alternation(false);
      --depth_;
      if (pos_ >= re_.size() || re_[pos_] != ')') error_at(at, "group is not closed by ')'");
      ++pos_;
      return inner.empty() ? "" : "(" + inner + ")";
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return ranges_expr(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true), options_.json_string);
    }
    if (c == '*' || c == '+' || c == '?') error("a quantifier needs something to repeat");
    if (c == '{') {
      const size_t save = pos_++;
      const bool quantifier = read_int().has_value();
      pos_ = save;
      if (quantifier) error("a quantifier needs something to repeat");
    }
    uint32_t cp = 0;
    if (c == '\\') {
      ++pos_;
      Ranges cls;
      if (read_escape(cls, cp, false)) return ranges_expr(normalize_ranges(cls, false), options_.json_string);
    } else {
      cp = read_char();
    }
    if (options_.json_string && needs_json_escape(cp)) return json_escape_literal(cp);
    return "\"" + literal_char(cp) + "\"";
  }

  std::string_view re_;
  RegexOptions options_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool top_level_alternation_ = false;
};

}  // namespace

std::string regex_to_ebnf(std::string_view regex, const RegexOptions& options) {
  return RegexParser(regex, options).parse();
}

std::string regex_grammar(std::string_view regex) { return "root ::= " + regex_to_ebnf(regex) + "\n"; }

std::string choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) throw GrammarError("choice: the list of choices is empty", 0, 0);
  std::string out = "root ::= ";
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].empty()) throw GrammarError(cat("choice: choice ", i, " is the empty string"), 0, 0);
    out += i ? " | \"" : "\"";
    // Every byte as an escape keeps the literal exact whatever it holds; decode as code points first.
    const std::string& s = choices[i];
    for (size_t k = 0; k < s.size();) {
      const auto b = static_cast<unsigned char>(s[k]);
      const int extra = b < 0x80 ? 0 : b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : -1;
      if (extra < 0 || k + static_cast<size_t>(extra) >= s.size()) {
        if (extra != 0) throw GrammarError(cat("choice: choice ", i, " is not valid UTF-8"), 0, 0);
      }
      uint32_t cp = extra == 0 ? b : b & (0x3F >> extra);
      for (int j = 1; j <= extra; ++j) cp = (cp << 6) | (static_cast<unsigned char>(s[k + static_cast<size_t>(j)]) & 0x3F);
      k += static_cast<size_t>(extra) + 1;
      out += literal_char(cp);
    }
    out += "\"";
  }
  return out + "\n";
}

}  // namespace strata::text::grammar
