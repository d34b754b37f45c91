#pragma once
// Compiled grammars shared across requests, keyed by (kind, source text): the server and `strata generate --input`
// compile a schema, regex, grammar or choice list once, and a request that repeats it gets the compiled grammar
// (with its filled token-mask cache) at once. Compilation runs on the caller's thread (the server's request
// workers, never the engine thread) under a size cap and a time cap; it includes every position's token mask, so
// the engine never meets a cold position in the middle of a step.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "text/grammar/compiled_grammar.h"
#include "text/grammar/token_vocabulary.h"

namespace strata::text::grammar {

// What the source text is.
enum class SourceKind {
  kJsonObject,  // response_format json_object: the source is ignored (any JSON object)
  kJsonSchema,  // a JSON Schema as JSON text
  kRegex,       // a regex matched against the whole output
  kEbnf,        // EBNF in the GBNF / XGrammar dialect (ebnf_parser.h)
  kChoice,      // a JSON array of strings: the output is one of them
  kMarkupEbnf,  // EBNF over the markup vocabulary: its control tokens (the DSML token) are matchable
};
const char* to_string(SourceKind kind);

struct GrammarCacheLimits {
  size_t max_source_bytes = 64 << 10;  // the schema, regex, grammar or choice list as given
  size_t max_symbols = 1 << 16;        // byte-level grammar symbols after lowering
  std::chrono::milliseconds max_compile_time{10000};  // conversion, lowering and every position's token mask
  size_t max_entries = 256;            // compiled grammars kept (least recently used dropped first)
};

struct GrammarCacheStats {
  int64_t hits = 0, misses = 0, entries = 0;
  double compile_seconds = 0;  // total time compiling (misses)
};

class GrammarCache {
 public:
  // `text`: the tokenizer's vocabulary with every added token excluded; `markup`: the same with the markup tokens
  // matchable (for kMarkupEbnf; may be null when no grammar names markup).
  GrammarCache(std::shared_ptr<const TokenVocabulary> text, std::shared_ptr<const TokenVocabulary> markup,
               GrammarCacheLimits limits = {});

  // The compiled grammar, from the cache or compiled now. Throws GrammarError: for a bad source, the converter's
  // message with its line:column; over a limit, which limit and by how much. A source that failed fails again
  // from the cache, without recompiling. Thread-safe.
  std::shared_ptr<const CompiledGrammar> get(SourceKind kind, std::string_view source);

  GrammarCacheStats stats() const;
  const TokenVocabulary& vocabulary() const { return *text_; }
  const GrammarCacheLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::string error;  // the GrammarError's message when it failed
    int line = 0, column = 0;
    std::list<std::string>::iterator lru;
  };
  std::shared_ptr<const CompiledGrammar> compile(SourceKind kind, std::string_view source) const;

  std::shared_ptr<const TokenVocabulary> text_, markup_;
  GrammarCacheLimits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // most recently used first
  GrammarCacheStats stats_;
};

}  // namespace strata::text::grammar
