// Fuzz target for the regex compiler (regex_to_grammar.h): regex → EBNF expression → grammar → masks.
// Input: one flags byte (bit 0: search, as a JSON Schema `pattern`; bit 1: inside a JSON string; bits 2-7: walk
// seed), then the regex. Properties (a violation aborts, which libFuzzer records as a crash):
//   * no crash, hang or undefined behaviour; a bad regex is a GrammarError, nothing else is thrown;
//   * the EBNF the converter writes always parses (a GrammarError there is the converter's bug);
//   * a random walk (grammar_fuzz_util.h): masks equal brute force, allowed tokens are accepted;
//   * inside a JSON string, every finished walk is the body of a valid JSON string;
//   * against PCRE2 as the reference matcher, for regexes in the syntax both read alike (literals a b c 0 1 -,
//     groups, |, quantifiers, classes, . ^ $, \d \w \D \W and escaped metacharacters): every short string over
//     {a, b, 0, -} and every finished walk's text matches in Strata exactly when it matches in PCRE2.
// fuzz-sources: src/text/*.cpp src/text/grammar/*.cpp
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "grammar_fuzz_util.h"
#include "text/grammar/ebnf_parser.h"
#include "text/grammar/regex_to_grammar.h"

namespace {

using namespace strata::text::grammar;
constexpr const char* kTarget = "regex_grammar_fuzz";

// Patterns whose every construct means the same in ECMA-262 (no u flag) and PCRE2: the oracle's domain. `[]` and
// `[^]` differ (ECMA: nothing / anything; PCRE2: a literal ']'), \s differs on Unicode spaces, and `.` on \r and
// U+2028/9 (texts holding those are not compared).
bool comparable(std::string_view re) {
  if (re.find("[]") != std::string_view::npos || re.find("[^]") != std::string_view::npos) return false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      if (++i >= re.size()) return false;
      if (std::string_view("dwDW.*+?()[]{}|^$\\-").find(re[i]) == std::string_view::npos) return false;
      continue;
    }
    if (std::string_view("abc01-()|*+?{},[]^$.").find(c) == std::string_view::npos) return false;
  }
  return true;
}

bool comparable_text(std::string_view s) {
  return s.find('\r') == std::string_view::npos && s.find("\xe2\x80\xa8") == std::string_view::npos &&
         s.find("\xe2\x80\xa9") == std::string_view::npos;
}

struct Pcre {
  pcre2_code* code = nullptr;
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  ~Pcre() {
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
    pcre2_code_free(code);
  }
  // 1 match, 0 no match, -1 PCRE2 gave up (match limit).
  int match(std::string_view s, bool search) const {
    const uint32_t options = search ? 0 : PCRE2_ANCHORED | PCRE2_ENDANCHORED;
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, options, data, context);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    return -1;
  }
};

bool strata_matches(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

// The JSON string body as its text (the walk wrote JSON escapes).
std::string decode_json_body(const std::string& body) {
  return nlohmann::json::parse("\"" + body + "\"").get<std::string>();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  RegexOptions options;
  options.search = (data[0] & 1) != 0;
  options.json_string = (data[0] & 2) != 0;
  const uint32_t seed = data[0] >> 2;
  const std::string_view regex(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string expr;
  try {
    expr = regex_to_ebnf(regex, options);
  } catch (const GrammarError&) {
    return 0;
  }
  const std::string ebnf = "root ::= " + expr + "\n";
  Grammar grammar;
  try {
    grammar = parse_ebnf(ebnf);
  } catch (const GrammarError& e) {
    std::fprintf(stderr, "%s\nconverted:\n%s", e.what(), ebnf.c_str());
    strata::fuzz::require(false, kTarget, "the converter's EBNF parses");
  }
  std::shared_ptr<const CompiledGrammar> compiled;
  try {
    compiled = CompiledGrammar::compile(grammar, strata::fuzz::walk_vocabulary());
  } catch (const GrammarError&) {
    return 0;  // e.g. a regex that only matches the empty string
  }
  if (compiled->byte_grammar().symbols().size() > strata::fuzz::kMaxWalkSymbols) return 0;
  const strata::fuzz::Walk walk = strata::fuzz::random_walk(compiled, seed, 24, kTarget);
  if (walk.ended && options.json_string) {
    strata::fuzz::require(nlohmann::json::accept("\"" + walk.text + "\""), kTarget, "a walk is a JSON string's body");
  }

  if (!comparable(regex)) return 0;
  Pcre pcre;
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(), PCRE2_UTF | PCRE2_DOLLAR_ENDONLY,
                            &error, &error_offset, nullptr);
  if (pcre.code == nullptr) return 0;  // PCRE2 refuses what ECMA Annex B reads (e.g. a lone '{'): nothing to compare
  pcre.data = pcre2_match_data_create_from_pattern(pcre.code, nullptr);
  pcre.context = pcre2_match_context_create(nullptr);
  pcre2_set_match_limit(pcre.context, 100000);
  auto agree = [&](const std::string& text) {
    const std::string plain = options.json_string ? decode_json_body(text) : text;
    if (!comparable_text(plain)) return;
    const int reference = pcre.match(plain, options.search);
    if (reference < 0) return;
    if (strata_matches(compiled, text) != (reference == 1)) {
      std::fprintf(stderr, "regex /%.*s/ (search %d, json %d) on \"%s\": PCRE2 %d, Strata %d\n",
                   static_cast<int>(regex.size()), regex.data(), options.search, options.json_string, plain.c_str(),
                   reference, 1 - reference);
      strata::fuzz::require(false, kTarget, "Strata and PCRE2 agree");
    }
  };
  if (walk.ended) agree(walk.text);
  // Every string of length 0..4 over a small alphabet.
  const char alphabet[] = {'a', 'b', '0', '-'};
  std::string s;
  for (int length = 0; length <= 4; ++length) {
    int total = 1;
    for (int i = 0; i < length; ++i) total *= 4;
    for (int k = 0; k < total; ++k) {
      s.clear();
      for (int i = 0, v = k; i < length; ++i, v /= 4) s += alphabet[v % 4];
      agree(s);
    }
  }
  return 0;
}
