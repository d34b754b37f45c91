#include "text/dsml.h"

#include <cstdio>

#include "core/error.h"

namespace strata::text::dsml {

Match match(std::string_view text, std::string_view literal) {
  if (text.size() >= literal.size()) return text.substr(0, literal.size()) == literal ? Match::kFull : Match::kNone;
  if (!text.empty() && literal.substr(0, text.size()) == text) return Match::kPartial;
  return Match::kNone;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '-'; }

TagParse malformed(std::string error) {
  TagParse result;
  result.status = TagStatus::kMalformed;
  result.error = std::move(error);
  return result;
}

// parse_open_tag without the length bound: kIncomplete whenever `text` ends before the tag does.
TagParse parse_unbounded(std::string_view text, std::string_view open) {
  TagParse result;  // kIncomplete until proven otherwise
  const Match head = match(text, open);
  if (head == Match::kPartial) return result;
  if (head == Match::kNone) return malformed(cat("expected '", open, "'"));

  size_t pos = open.size();
  const auto at_end = [&] { return pos >= text.size(); };
  while (true) {
    if (at_end()) return result;
    if (text[pos] == '>') {
      result.status = TagStatus::kComplete;
      result.length = pos + 1;
      return result;
    }
    // Every attribute is preceded by whitespace, which also ends the tag's name ("<｜DSML｜invokes" is no invoke).
    if (!is_space(text[pos])) {
      return malformed(cat("expected whitespace or '>' in tag '", excerpt(text.substr(0, pos + 1)), "'"));
    }
    while (!at_end() && is_space(text[pos])) ++pos;
    if (at_end()) return result;
    if (text[pos] == '>') continue;

    const size_t name_start = pos;
    if (!is_name_start(text[pos])) {
      return malformed(cat("expected an attribute name in tag '", excerpt(text.substr(0, pos + 1)), "'"));
    }
    while (!at_end() && is_name_char(text[pos])) ++pos;
    if (at_end()) return result;
    Attribute attribute;
    attribute.name = std::string(text.substr(name_start, pos - name_start));
    if (text[pos] != '=') {
      return malformed(
          cat("expected '=\"' after attribute '", attribute.name, "' in tag '", excerpt(text.substr(0, pos + 1)), "'"));
    }
    if (++pos >= text.size()) return result;
    if (text[pos] != '"') {
      return malformed(
          cat("expected '\"' after '", attribute.name, "=' in tag '", excerpt(text.substr(0, pos + 1)), "'"));
    }
    const size_t value_start = ++pos;
    while (!at_end() && text[pos] != '"') {
      const char c = text[pos];
      if (c == '<' || c == '>' || c == '\n') {
        return malformed(cat("unterminated value of attribute '", attribute.name, "' in tag '",
                             excerpt(text.substr(0, pos + 1)), "'"));
      }
      ++pos;
    }
    if (at_end()) return result;
    attribute.value = std::string(text.substr(value_start, pos - value_start));
    ++pos;  // the closing quote
    result.attributes.push_back(std::move(attribute));
  }
}

}  // namespace

TagParse parse_open_tag(std::string_view text, std::string_view open) {
  if (text.size() <= kMaxTagLength) return parse_unbounded(text, open);
  TagParse result = parse_unbounded(text.substr(0, kMaxTagLength), open);
  if (result.status != TagStatus::kIncomplete) return result;
  return malformed(cat("tag '", excerpt(text), "' is longer than ", kMaxTagLength, " bytes"));
}

void append_json_escaped(std::string& out, std::string_view raw) {
  for (const char ch : raw) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += ch;
        }
    }
  }
}

std::string json_string(std::string_view raw) {
  std::string out = "\"";
  append_json_escaped(out, raw);
  out += '"';
  return out;
}

size_t incomplete_utf8_suffix(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: its lead byte is further back
    const size_t length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

std::string excerpt(std::string_view text, size_t limit) {
  size_t cut = text.size();
  bool shortened = false;
  if (cut > limit) {
    cut = limit;
    shortened = true;
  }
  cut -= incomplete_utf8_suffix(text.substr(0, cut));  // keep characters whole
  std::string out;
  for (const char c : text.substr(0, cut)) {
    if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
  }
  if (shortened) out += "...";
  return out;
}

}  // namespace strata::text::dsml
