#include "text/grammar/ebnf_parser.h"

#include <map>
#include <optional>

#include "text/grammar/utf8_ranges.h"

namespace strata::text::grammar {
namespace {

// The largest {m,n} bound: repetition is lowered by copying, so a bound is a size, and a grammar is untrusted input.
constexpr int32_t kMaxRepeatBound = 1024;
// Parentheses nest by recursion (here and in lowering and printing): a bound keeps a hostile grammar from
// overflowing the stack of the thread that compiles it.
constexpr int kMaxNesting = 1000;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

std::string describe(std::string_view text, size_t pos) {
  if (pos >= text.size()) return "the end of the grammar";
  const char c = text[pos];
  if (c == '\n') return "a newline";
  if (static_cast<unsigned char>(c) < 0x20) return "a control character";
  return cat("'", c, "'");
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view root_rule) : text_(text), root_name_(root_rule) {}

  Grammar parse() {
    skip_space();
    while (pos_ < text_.size()) {
      const size_t name_pos = pos_;
      if (!is_name_char(text_[pos_])) {
        error(cat("expected a rule name (letters, digits, '_' or '-') but found ", describe(text_, pos_)), pos_);
      }
      const std::string name = read_name();
      skip_space();
      if (text_.substr(pos_, 3) != "::=") {
        error(cat("expected '::=' after rule name '", name, "' but found ", describe(text_, pos_)), pos_);
      }
      pos_ += 3;
      const uint32_t rule = rule_index(name, name_pos);
      if (defined_[rule]) {
        error(cat("rule '", name, "' is defined twice (first at ", where(definition_pos_[rule]), ")"), name_pos);
      }
      defined_[rule] = true;
      definition_pos_[rule] = name_pos;
      g_.rules[rule].body = parse_choice();
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ')') error("unbalanced ')': no '(' is open", pos_);
    }
    for (uint32_t r = 0; r < g_.rules.size(); ++r) {
      if (!defined_[r]) {
        error(cat("rule '", g_.rules[r].name, "' is used but never defined"), first_use_pos_[r]);
      }
    }
    const auto root = names_.find(std::string(root_name_));
    if (root == names_.end()) {
      throw GrammarError(cat("grammar: no rule named '", root_name_, "' (the start rule)"), 0, 0);
    }
    g_.root = root->second;
    return std::move(g_);
  }

 private:
  [[noreturn]] void error(const std::string& message, size_t pos) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) {
        ++column;  // columns count code points, not bytes
      }
    }
    throw GrammarError(cat("grammar: ", line, ":", column, ": ", message), line, column);
  }

  std::string where(size_t pos) const {
    try {
      error("", pos);
    } catch (const GrammarError& e) {
      return cat(e.line(), ":", e.column());
    }
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t rule_index(const std::string& name, size_t pos) {
    const auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const auto index = static_cast<uint32_t>(g_.rules.size());
    g_.rules.push_back({name, 0});
    defined_.push_back(false);
    definition_pos_.push_back(0);
    first_use_pos_.push_back(pos);
    names_.emplace(name, index);
    return index;
  }

  // True when the text at pos_ is `name ::=`: the start of the next rule, which ends the current one.
  bool at_rule_start() const {
    size_t p = pos_;
    if (p >= text_.size() || !is_name_char(text_[p])) return false;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  uint32_t parse_choice() {
    std::vector<uint32_t> alternatives{parse_sequence()};
    while (true) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '|') break;
      ++pos_;
      alternatives.push_back(parse_sequence());
    }
    return g_.choice(std::move(alternatives));
  }

  uint32_t parse_sequence() {
    std::vector<uint32_t> items;
    while (true) {
      skip_space();
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == ')' || c == '|' || at_rule_start()) break;
      items.push_back(parse_postfix(parse_primary()));
    }
    return g_.sequence(std::move(items));
  }

  uint32_t parse_primary() {
    const char c = text_[pos_];
    if (c == '"' || c == '\'') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return g_.char_class({}, /*negated=*/true);
    }
    if (c == '(') {
      const size_t open = pos_++;
      if (++depth_ > kMaxNesting) error(cat("parentheses nest deeper than ", kMaxNesting, " levels"), open);
      const uint32_t inner = parse_choice();
      --depth_;
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ')') {
        error(cat("expected ')' to close the '(' at ", where(open), " but found ", describe(text_, pos_)), pos_);
      }
      ++pos_;
      return inner;
    }
    if (is_name_char(c)) {
      const size_t at = pos_;
      return g_.rule_ref(rule_index(read_name(), at));
    }
    error(cat("expected an expression (a \"literal\", a [class], a rule name or '(') but found ", describe(text_, pos_)),
          pos_);
  }

  uint32_t parse_postfix(uint32_t expr) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '*') {
        expr = g_.repeat(expr, 0, kUnbounded);
      } else if (c == '+') {
        expr = g_.repeat(expr, 1, kUnbounded);
      } else if (c == '?') {
        expr = g_.repeat(expr, 0, 1);
      } else if (c == '{') {
        expr = parse_bounds(expr);
        continue;
      } else {
        break;
      }
      ++pos_;
    }
    return expr;
  }

  std::optional<int32_t> read_number() {
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = value * 10 + (text_[pos_] - '0');
      if (value > kMaxRepeatBound) error(cat("repetition bound is over the limit of ", kMaxRepeatBound), start);
      ++pos_;
    }
    if (pos_ == start) return std::nullopt;
    return static_cast<int32_t>(value);
  }

  uint32_t parse_bounds(uint32_t expr) {
    const size_t open = pos_++;
    skip_space();
    const std::optional<int32_t> min = read_number();
    if (!min) error(cat("expected a number after '{' but found ", describe(text_, pos_)), pos_);
    skip_space();
    int32_t max = *min;
    if (pos_ < text_.size() && text_[pos_] == ',') {
      ++pos_;
      skip_space();
      const size_t at = pos_;
      const std::optional<int32_t> upper = read_number();
      max = upper ? *upper : kUnbounded;
      if (upper && *upper < *min) error(cat("repetition {", *min, ",", *upper, "}: the maximum is below the minimum"), at);
      skip_space();
    }
    if (pos_ >= text_.size() || text_[pos_] != '}') {
      error(cat("expected '}' to close the repetition opened at ", where(open), " but found ", describe(text_, pos_)),
            pos_);
    }
    ++pos_;
    return g_.repeat(expr, *min, max);
  }

  // One code point of the source text (UTF-8) or of an escape; `quote` is the closing delimiter.
  uint32_t read_codepoint(const char* context) {
    const size_t at = pos_;
    const auto b = static_cast<unsigned char>(text_[pos_]);
    if (b == '\\') {
      ++pos_;
      if (pos_ >= text_.size()) error(cat("unfinished escape at the end of the grammar in ", context), at);
      const char e = text_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': case '|':
        case '(': case ')': case '{': case '}': case '*': case '+': case '?':
          return static_cast<unsigned char>(e);
        case 'x': return read_hex(2, at);
        case 'u': return read_hex(4, at);
        case 'U': return read_hex(8, at);
        default:
          error(cat("unknown escape '\\", e, "' in ", context, " (known: \\n \\r \\t \\\\ \\\" \\' \\xHH \\uHHHH \\UHHHHHHHH)"), at);
      }
    }
    const std::optional<uint32_t> cp = decode_utf8(text_, pos_);
    if (!cp) error("the grammar is not valid UTF-8", at);
    return *cp;
  }

  uint32_t read_hex(int digits, size_t at) {
    uint32_t cp = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      const char h = pos_ < text_.size() ? text_[pos_] : '\0';
      const int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (v < 0) error(cat("escape needs ", digits, " hex digits but found ", describe(text_, pos_)), at);
      cp = cp * 16 + static_cast<uint32_t>(v);
    }
    if (cp > kMaxCodepoint) error(cat("escape names code point 0x", std::hex, cp, ", above U+10FFFF"), at);
    if (cp >= 0xD800 && cp <= 0xDFFF) error("escape names a UTF-16 surrogate, which UTF-8 cannot hold", at);
    return cp;
  }

  uint32_t parse_literal() {
    const char quote = text_[pos_];
    const size_t open = pos_++;
    std::string bytes;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        error(cat("unterminated string literal (opened at ", where(open), ")"), pos_);
      }
      if (text_[pos_] == quote) break;
      append_utf8(read_codepoint("a string literal"), bytes);
    }
    ++pos_;
    return g_.literal(std::move(bytes));
  }

  uint32_t parse_class() {
    const size_t open = pos_++;
    bool negated = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodepointRange> ranges;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') {
        error(cat("unterminated character class (opened at ", where(open), ")"), pos_);
      }
      if (text_[pos_] == ']') break;
      const size_t at = pos_;
      const uint32_t first = read_codepoint("a character class");
      uint32_t last = first;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        last = read_codepoint("a character class");
        if (last < first) error("character range is out of order (the end is below the start)", at);
      }
      ranges.push_back({first, last});
    }
    ++pos_;
    if (ranges.empty()) error(negated ? "empty negated class [^] (use . for any character)" : "empty character class []", open);
    return g_.char_class(std::move(ranges), negated);
  }

  std::string_view text_;
  std::string_view root_name_;
  size_t pos_ = 0;
  int depth_ = 0;
  Grammar g_;
  std::map<std::string, uint32_t> names_;
  std::vector<bool> defined_;
  std::vector<size_t> definition_pos_;
  std::vector<size_t> first_use_pos_;
};

}  // namespace

Grammar parse_ebnf(std::string_view text, std::string_view root_rule) { return Parser(text, root_rule).parse(); }

}  // namespace strata::text::grammar
