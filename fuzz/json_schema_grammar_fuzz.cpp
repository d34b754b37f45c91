// Fuzz target for the JSON Schema compiler (json_schema_to_grammar.h): schema → EBNF → grammar → masks.
// Input: one seed byte, then the schema's JSON text. Properties (a violation aborts, which libFuzzer records as a
// crash):
//   * no crash, hang or undefined behaviour; a bad or unsupported schema is a GrammarError, nothing else is thrown;
//   * the EBNF the converter writes always parses (a GrammarError there is the converter's bug);
//   * a random walk (grammar_fuzz_util.h): masks equal brute force, allowed tokens are accepted;
//   * every finished walk is valid JSON;
//   * numeric bounds: for a schema {"type": "integer" | "number", minimum / maximum / exclusive...}, a finished
//     walk is a number inside them.
// fuzz-sources: src/text/*.cpp src/text/grammar/*.cpp
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <string_view>

#include "grammar_fuzz_util.h"
#include "text/grammar/ebnf_parser.h"
#include "text/grammar/json_schema_to_grammar.h"

namespace {

using namespace strata::text::grammar;
constexpr const char* kTarget = "json_schema_grammar_fuzz";

// JSON syntax (RFC 8259), which has no limit on a number's size: nlohmann refuses numbers past a double's range
// (out_of_range 406), so exponents and long digit runs are shrunk first — both are regular, and shrinking one inside a
// string keeps the string valid.
bool is_json(const std::string& text) {
  static const std::regex exponent("([0-9])[eE][+-]?[0-9]+"), long_digits("[0-9]{16,}");
  return nlohmann::json::accept(std::regex_replace(std::regex_replace(text, exponent, "$1e0"), long_digits, "1"));
}

// Significant digits of a JSON number's text (sign, point, exponent and leading zeros aside).
size_t significant_digits(std::string_view number) {
  size_t n = 0;
  bool leading = true;
  for (const char c : number) {
    if (c == 'e' || c == 'E') break;
    if (c < '0' || c > '9') continue;
    if (leading && c == '0') continue;
    leading = false;
    ++n;
  }
  return n;
}

// For a top-level {"type": "integer" | "number", <numeric bounds>} schema and a walk: whether the walk lies inside
// the bounds, compared as doubles — exact here because the oracle only takes walks and bounds of at most 15
// significant digits, which doubles keep distinct and in order — or nullopt outside that domain.
std::optional<bool> within_bounds(std::string_view schema, const std::string& walk) {
  const nlohmann::json s = nlohmann::json::parse(schema, nullptr, false);
  if (!s.is_object()) return std::nullopt;
  const nlohmann::json type = s.value("type", nlohmann::json());
  if (type != "integer" && type != "number") return std::nullopt;
  if (significant_digits(walk) > 15) return std::nullopt;
  double v = 0;
  try {
    v = std::stod(walk);
  } catch (const std::exception&) {  // past a double's range: outside the oracle's domain
    return std::nullopt;
  }
  if (!std::isfinite(v)) return std::nullopt;
  bool inside = true;
  for (auto it = s.begin(); it != s.end(); ++it) {
    if (it.key() == "type") continue;
    if (!it.value().is_number() || significant_digits(it.value().dump()) > 15) return std::nullopt;
    const double b = it.value().get<double>();
    if (it.key() == "minimum") inside = inside && v >= b;
    else if (it.key() == "maximum") inside = inside && v <= b;
    else if (it.key() == "exclusiveMinimum") inside = inside && v > b;
    else if (it.key() == "exclusiveMaximum") inside = inside && v < b;
    else return std::nullopt;  // draft-4 booleans and other keywords: not this oracle's domain
  }
  return inside;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t seed = data[0];
  const std::string_view schema(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string ebnf;
  try {
    ebnf = json_schema_to_ebnf(schema);
  } catch (const GrammarError&) {
    return 0;
  }
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
    return 0;  // e.g. {"$ref": "#"}: a schema no finite value satisfies
  }
  if (compiled->byte_grammar().symbols().size() > strata::fuzz::kMaxWalkSymbols) return 0;
  const strata::fuzz::Walk walk = strata::fuzz::random_walk(compiled, seed, 32, kTarget);
  if (!walk.ended) return 0;
  if (!is_json(walk.text)) {
    std::fprintf(stderr, "walk: %s\n", walk.text.c_str());
    strata::fuzz::require(false, kTarget, "a walk is valid JSON");
  }
  if (const std::optional<bool> inside = within_bounds(schema, walk.text); inside && !*inside) {
    std::fprintf(stderr, "walk: %s\n", walk.text.c_str());
    strata::fuzz::require(false, kTarget, "a bounded number's walk is inside its bounds");
  }
  return 0;
}
