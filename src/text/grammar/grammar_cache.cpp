#include "text/grammar/grammar_cache.h"

#include <atomic>

#include <nlohmann/json.hpp>

#include "text/grammar/ebnf_parser.h"
#include "text/grammar/json_schema_to_grammar.h"
#include "text/grammar/regex_to_grammar.h"

namespace strata::text::grammar {

namespace {

using Clock = std::chrono::steady_clock;

// A choice list's JSON text → its strings; anything else is an error naming what was found.
std::vector<std::string> choices_of(std::string_view source) {
  nlohmann::json list;
  try {
    list = nlohmann::json::parse(source);
  } catch (const nlohmann::json::exception& e) {
    throw GrammarError(cat("choice: not valid JSON (", e.what(), ")"), 0, 0);
  }
  if (!list.is_array()) throw GrammarError("choice: expected an array of strings", 0, 0);
  std::vector<std::string> out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) throw GrammarError(cat("choice[", i, "]: expected a string"), 0, 0);
    out.push_back(list[i].get<std::string>());
  }
  return out;
}

std::string ebnf_of(SourceKind kind, std::string_view source) {
  switch (kind) {
    case SourceKind::kJsonObject: return json_object_ebnf();
    case SourceKind::kJsonSchema: return json_schema_to_ebnf(source);
    case SourceKind::kRegex: return regex_grammar(source);
    case SourceKind::kChoice: return choice_grammar(choices_of(source));
    case SourceKind::kEbnf:
    case SourceKind::kMarkupEbnf: return std::string(source);
  }
  return std::string(source);
}

}  // namespace

const char* to_string(SourceKind kind) {
  switch (kind) {
    case SourceKind::kJsonObject: return "json_object";
    case SourceKind::kJsonSchema: return "json schema";
    case SourceKind::kRegex: return "regex";
    case SourceKind::kEbnf: return "grammar";
    case SourceKind::kChoice: return "choice";
    case SourceKind::kMarkupEbnf: return "tool-call grammar";
  }
  return "grammar";
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> text, std::shared_ptr<const TokenVocabulary> markup,
                           GrammarCacheLimits limits)
    : text_(std::move(text)), markup_(std::move(markup)), limits_(limits) {
  if (!text_) fail("grammar cache: no vocabulary");
  if (limits_.max_entries < 1) fail("grammar cache: max_entries must be ≥ 1");
}

std::shared_ptr<const CompiledGrammar> GrammarCache::compile(SourceKind kind, std::string_view source) const {
  if (source.size() > limits_.max_source_bytes)
    throw GrammarError(cat(to_string(kind), ": ", source.size(), " bytes, over the limit of ", limits_.max_source_bytes),
                       0, 0);
  const std::shared_ptr<const TokenVocabulary>& vocab = kind == SourceKind::kMarkupEbnf ? markup_ : text_;
  if (!vocab) fail("grammar cache: no markup vocabulary for a ", to_string(kind));
  const auto start = Clock::now(), deadline = start + limits_.max_compile_time;
  auto grammar = CompiledGrammar::from_ebnf(ebnf_of(kind, source), vocab);
  const size_t symbols = grammar->byte_grammar().symbols().size();
  if (symbols > limits_.max_symbols)
    throw GrammarError(cat(to_string(kind), ": compiles to ", symbols, " byte-level symbols, over the limit of ",
                           limits_.max_symbols),
                       0, 0);
  // Every kernel position's token mask now (a position walks the vocabulary once: milliseconds to a second each),
  // against the deadline. Positions are independent, so they go on every core: a schema's few hundred positions
  // are most of its compile time.
  std::vector<uint32_t> kernel;
  for (uint32_t pos = 0; pos < symbols; ++pos)
    if (grammar->is_kernel(pos)) kernel.push_back(pos);
  const auto n = static_cast<int64_t>(kernel.size());
  std::atomic<bool> late{false};
#pragma omp parallel for schedule(dynamic) if (n >= 4)
  for (int64_t i = 0; i < n; ++i) {
    if (late.load(std::memory_order_relaxed)) continue;
    if (Clock::now() > deadline) {
      late = true;
      continue;
    }
    grammar->position_mask(kernel[static_cast<size_t>(i)]);
  }
  if (late)
    throw GrammarError(cat(to_string(kind), ": compiling took over the limit of ", limits_.max_compile_time.count(),
                           " ms (", symbols, " byte-level symbols)"),
                       0, 0);
  return grammar;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(SourceKind kind, std::string_view source) {
  std::string key = cat(static_cast<int>(kind), ":", source);
  {
    std::lock_guard lock(mu_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      if (!it->second.grammar) throw GrammarError(it->second.error, it->second.line, it->second.column);
      return it->second.grammar;
    }
  }
  // Compiled outside the lock: two threads asking for one new grammar may both compile it (the first one kept).
  Entry entry;
  const auto start = Clock::now();
  try {
    entry.grammar = compile(kind, source);
  } catch (const GrammarError& e) {
    entry.error = e.what();
    entry.line = e.line();
    entry.column = e.column();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::lock_guard lock(mu_);
  ++stats_.misses;
  stats_.compile_seconds += seconds;
  auto [it, inserted] = entries_.try_emplace(key, std::move(entry));
  if (inserted) {
    lru_.push_front(key);
    it->second.lru = lru_.begin();
    while (entries_.size() > limits_.max_entries) {
      entries_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  stats_.entries = static_cast<int64_t>(entries_.size());
  if (!it->second.grammar) throw GrammarError(it->second.error, it->second.line, it->second.column);
  return it->second.grammar;
}

GrammarCacheStats GrammarCache::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace strata::text::grammar
