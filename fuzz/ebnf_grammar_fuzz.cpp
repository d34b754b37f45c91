// Fuzz target for the EBNF compiler (ebnf_parser.h → grammar.h → byte_grammar.h) and the matcher it feeds.
// Input: one seed byte, then the grammar text. Properties (a violation aborts, which libFuzzer records as a crash):
//   * no crash, hang or undefined behaviour; a bad grammar is a GrammarError, nothing else is thrown;
//   * printing is a fixed point: to_ebnf(parse(to_ebnf(g))) holds the rules of to_ebnf(g) (in any order), and the
//     printed grammar lowers alike;
//   * for a grammar that lowers: a random walk (grammar_fuzz_util.h) whose masks equal brute force, whose allowed
//     tokens are accepted and whose finished text is a sentence — of the printed grammar as well.
// fuzz-sources: src/text/*.cpp src/text/grammar/*.cpp
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar_fuzz_util.h"
#include "text/grammar/ebnf_parser.h"

namespace {

using namespace strata::text::grammar;
constexpr const char* kTarget = "ebnf_grammar_fuzz";

std::vector<std::string> sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) lines.push_back(text.substr(start, nl - start));
  std::sort(lines.begin(), lines.end());
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t seed = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  Grammar grammar;
  try {
    grammar = parse_ebnf(text);
  } catch (const GrammarError&) {
    return 0;
  }
  const std::string printed = to_ebnf(grammar);
  Grammar reparsed;
  try {
    reparsed = parse_ebnf(printed);
  } catch (const GrammarError& e) {
    std::fprintf(stderr, "%s\nprinted grammar:\n%s", e.what(), printed.c_str());
    strata::fuzz::require(false, kTarget, "the printed grammar parses");
  }
  // Rule order may change (a reparse numbers rules by first appearance in the printed text), bodies may not.
  strata::fuzz::require(sorted_lines(to_ebnf(reparsed)) == sorted_lines(printed), kTarget, "printing is a fixed point");

  std::shared_ptr<const CompiledGrammar> compiled;
  try {
    compiled = CompiledGrammar::compile(grammar, strata::fuzz::walk_vocabulary());
  } catch (const GrammarError&) {
    bool printed_lowers = true;
    try {
      ByteGrammar::lower(reparsed);
    } catch (const GrammarError&) {
      printed_lowers = false;
    }
    strata::fuzz::require(!printed_lowers, kTarget, "the grammar and its printed form lower alike");
    return 0;
  }
  if (compiled->byte_grammar().symbols().size() > strata::fuzz::kMaxWalkSymbols) return 0;
  const auto again = CompiledGrammar::compile(reparsed, strata::fuzz::walk_vocabulary());
  const strata::fuzz::Walk walk = strata::fuzz::random_walk(compiled, seed, 24, kTarget);
  if (walk.ended) {
    GrammarMatcher m(again);
    strata::fuzz::require(m.accept_bytes(walk.text) && m.can_end(), kTarget, "a walk's sentence is one of the printed grammar");
  }
  return 0;
}
