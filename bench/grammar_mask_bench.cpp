// Token-mask time at the DeepSeek vocabulary (issue 16's benchmark): compiles a grammar, tokenizes a corpus of
// documents it accepts, and times GrammarMatcher::fill_mask before every token of every document. The first pass
// fills the per-position cache (cold: includes its lazy precomputation); the second pass is the steady state a
// server sees once a grammar is cached. Writes JSON.
//
//   strata_grammar_bench --tokenizer .deps/tokenizer-deepseek_v3 --grammar json --out bench/results/grammar_mask_cpu.json
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/grammar/compiled_grammar.h"
#include "text/grammar/grammar_matcher.h"
#include "text/grammar/json_schema_to_grammar.h"
#include "text/grammar/regex_to_grammar.h"
#include "text/tokenizer.h"

namespace g = strata::text::grammar;
using Clock = std::chrono::steady_clock;

namespace {

const std::vector<std::string> kJsonDocs = {
    R"({"name": "Strata", "version": "0.1.0", "tags": ["inference", "c++", "cuda"], "stars": 1280})",
    R"({"id": 42, "ok": true, "ratio": -0.125e-3, "nested": {"a": [1, 2, 3], "b": null}, "text": "hello\nworld"})",
    R"({"cities": [{"city": "Paris", "country": "France", "population": 2161000}, {"city": "東京", "country": "日本"}]})",
    "{\n  \"model\": \"deepseek-v4\",\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"What is 23 plus 45?\"}\n  ],\n  \"max_tokens\": 64\n}",
    R"({"query": "SELECT * FROM t WHERE x = \"y\"", "escaped": "tab\tquote\" backslash\\ unicode \u00e9", "empty": {}})",
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

nlohmann::json summary(const std::vector<double>& us) {
  double sum = 0;
  for (double x : us) sum += x;
  return {{"masks", us.size()},
          {"mean_us", us.empty() ? 0 : sum / static_cast<double>(us.size())},
          {"p50_us", percentile(us, 0.50)},
          {"p90_us", percentile(us, 0.90)},
          {"p99_us", percentile(us, 0.99)},
          {"max_us", us.empty() ? 0 : *std::max_element(us.begin(), us.end())}};
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string", "format": "email"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city"]}},
  "required": ["name", "age"]})";

const std::vector<std::string> kSchemaDocs = {
    R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "tags": ["math", "poetry"], "address": {"city": "London", "zip": "12345"}})",
    "{\n  \"name\": \"Grace\",\n  \"age\": 85,\n  \"tags\": []\n}",
    R"({"name":"李雷","age":7,"address":{"city":"北京"}})",
};

const std::vector<std::string> kRegexDocs = {"2024-02-29T23:59:60.5+01:00", "1999-12-31T00:00:00Z",
                                             "2026-11-29T08:15:00-05:30"};

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_dir = ".deps/tokenizer-deepseek_v3", out_path, commit;
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokenizer") tokenizer_dir = next();
    else if (a == "--out") out_path = next();
    else if (a == "--commit") commit = next();
    else if (a == "--repeats") repeats = std::stoi(next());
    else {
      std::cerr << "usage: strata_grammar_bench [--tokenizer DIR] [--out FILE.json] [--commit SHA] [--repeats N]\n"
                   "example: strata_grammar_bench --tokenizer .deps/tokenizer-deepseek_v3 --out /tmp/mask.json\n";
      return a == "--help" ? 0 : 2;
    }
  }
  const strata::text::Tokenizer tokenizer = strata::text::Tokenizer::load(tokenizer_dir);
  const auto vocab = std::make_shared<const g::TokenVocabulary>(g::TokenVocabulary::from_tokenizer(tokenizer));

  nlohmann::json result = {{"benchmark", "grammar_mask"}, {"vocab_size", vocab->size()},
                           {"mask_words", vocab->mask_words()}, {"commit", commit}, {"cases", nlohmann::json::array()}};
  struct Case {
    std::string name;
    std::string ebnf;
    std::vector<std::string> docs;
  };
  const std::vector<Case> cases = {
      {"json_object", g::json_object_ebnf(), kJsonDocs},
      {"json_schema_person", g::json_schema_to_ebnf(kSchema), kSchemaDocs},
      {"regex_date_time", g::regex_grammar(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"), kRegexDocs}};
  for (const Case& c : cases) {
    const auto t0 = Clock::now();
    const auto compiled = g::CompiledGrammar::from_ebnf(c.ebnf, vocab);
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::vector<double> cold, warm;
    std::vector<uint32_t> words(vocab->mask_words());
    size_t tokens = 0;
    for (int pass = 0; pass < 1 + repeats; ++pass) {
      for (const std::string& doc : c.docs) {
        g::GrammarMatcher m(compiled);
        for (const int32_t id : tokenizer.encode(doc)) {
          const auto s = Clock::now();
          m.fill_mask(words.data());
          const double us = std::chrono::duration<double, std::micro>(Clock::now() - s).count();
          (pass == 0 ? cold : warm).push_back(us);
          if (!((words[static_cast<size_t>(id) / 32] >> (id % 32)) & 1) || !m.accept_token(id)) {
            std::cerr << c.name << ": token '" << vocab->bytes(id) << "' of a valid document was masked out\n";
            return 1;
          }
          tokens += pass == 0;
        }
      }
    }
    result["cases"].push_back({{"grammar", c.name}, {"documents", c.docs.size()}, {"tokens", tokens},
                               {"compile_ms", compile_ms}, {"cold", summary(cold)}, {"warm", summary(warm)}});
  }
  std::cout << result.dump(2) << "\n";
  if (!out_path.empty()) std::ofstream(out_path) << result.dump(2) << "\n";
  return 0;
}
