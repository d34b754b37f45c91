// Strata's side of the differential test against XGrammar (differential.mjs): reads a vocabulary and cases of
// token sequences as JSON, runs each sequence through a GrammarMatcher, and writes what happened as JSON — the index
// of the first token refused (or -1), whether the stop token was then accepted, and, when asked, the allowed-token
// mask before every step. The node script runs XGrammar on the same input and compares.
//
//   strata_grammar_verdicts CASES.json > VERDICTS.json
//
// Input:  {"vocab": ["hex bytes", ...], "eos": ID,
//          "cases": [{"name", "kind": "json_schema" | "regex" | "ebnf", "source": TEXT,
//                     "sequences": [[ids...], ...], "masks": [sequence indices]}]}
// Output: {"cases": [{"name", "error": MESSAGE} | {"name", "results": [{"refused_at": K, "ended": B,
//          "masks": [[allowed ids...] before token 0, 1, ...]}]}]}
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "text/grammar/compiled_grammar.h"
#include "text/grammar/ebnf_parser.h"
#include "text/grammar/grammar_matcher.h"
#include "text/grammar/json_schema_to_grammar.h"
#include "text/grammar/regex_to_grammar.h"
#include "text/grammar/token_vocabulary.h"

namespace {

using nlohmann::json;
using namespace strata::text::grammar;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<int32_t> allowed(GrammarMatcher& m, const TokenVocabulary& vocab) {
  std::vector<uint32_t> words(vocab.mask_words());
  m.fill_mask(words.data());
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if ((words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) ids.push_back(id);
  }
  return ids;
}

std::string ebnf_for(const std::string& kind, const std::string& source) {
  if (kind == "json_schema") return json_schema_to_ebnf(source);
  if (kind == "regex") return regex_grammar(source);
  if (kind == "ebnf") return source;
  throw GrammarError("unknown kind '" + kind + "' (json_schema, regex, ebnf)", 0, 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: strata_grammar_verdicts CASES.json > VERDICTS.json\n");
    return 2;
  }
  std::ifstream file(argv[1]);
  if (!file) {
    std::fprintf(stderr, "strata_grammar_verdicts: cannot read %s\n", argv[1]);
    return 2;
  }
  const json input = json::parse(file);
  std::vector<std::string> tokens;
  for (const json& hex : input.at("vocab")) tokens.push_back(from_hex(hex.get<std::string>()));
  const auto eos = input.at("eos").get<int32_t>();
  std::vector<bool> excluded(tokens.size(), false);
  const auto vocab = std::make_shared<const TokenVocabulary>(std::move(tokens), std::move(excluded), eos);

  json out_cases = json::array();
  for (const json& c : input.at("cases")) {
    json out = {{"name", c.at("name")}};
    std::shared_ptr<const CompiledGrammar> grammar;
    try {
      grammar = CompiledGrammar::from_ebnf(ebnf_for(c.at("kind"), c.at("source")), vocab);
    } catch (const GrammarError& e) {
      out["error"] = e.what();
      out_cases.push_back(out);
      continue;
    }
    std::vector<bool> with_masks(c.at("sequences").size(), false);
    for (const json& i : c.value("masks", json::array())) with_masks.at(i.get<size_t>()) = true;
    json results = json::array();
    for (size_t s = 0; s < c.at("sequences").size(); ++s) {
      GrammarMatcher m(grammar);
      json masks = json::array();
      int refused_at = -1;
      const json& ids = c.at("sequences")[s];
      for (size_t k = 0; k < ids.size(); ++k) {
        if (with_masks[s]) masks.push_back(allowed(m, *vocab));
        if (!m.accept_token(ids[k].get<int32_t>())) {
          refused_at = static_cast<int>(k);
          break;
        }
      }
      json r = {{"refused_at", refused_at}, {"ended", refused_at < 0 && m.accept_token(eos)}};
      if (with_masks[s]) {
        if (refused_at < 0) masks.push_back(allowed(m, *vocab));
        r["masks"] = masks;
      }
      results.push_back(r);
    }
    out["results"] = results;
    out_cases.push_back(out);
  }
  std::cout << json{{"cases", out_cases}}.dump() << "\n";
  return 0;
}
