#pragma once
// The engine flags `strata serve` and offline `strata generate --input` share: --max-num-seqs,
// --max-num-batched-tokens, --state-memory (read before the model loads, so a bad flag fails fast) and
// --max-model-len (checked against the loaded model).
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "cli/args.h"
#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "model/model.h"

namespace strata::cli {

struct EngineOptions {
  int64_t max_num_seqs = 0, max_num_batched_tokens = 0, state_bytes = 0;  // state_bytes 0: not given
  bool cache = true;                                                     // --cache on|off
  cache::CacheConfig cache_config;                                       // the --cache-* flags
  engine::SpeculativeConfig speculative;                                 // --speculative-tokens, --speculative-min-prob
  // The states' max_rollback the model must be loaded with (open_checkpoint): the drafts a verify step may drop.
  int64_t max_rollback() const { return std::max<int64_t>(1, speculative.tokens); }
};

// The speculative-decoding flags (valued options) `serve` and both forms of `generate` take, and their help text.
extern const std::set<std::string> kSpeculativeOptions;
extern const char* const kSpeculativeOptionsHelp;
std::set<std::string> with_speculative_options(std::set<std::string> valued);
// --speculative-tokens N (0..8, default 0) and --speculative-min-prob P ([0, 1], default 0.1), checked.
engine::SpeculativeConfig read_speculative_options(const Args& args);

// The prefix-cache flags both commands take (valued options), and their help text.
extern const std::set<std::string> kCacheOptions;
extern const char* const kCacheOptionsHelp;
std::set<std::string> with_cache_options(std::set<std::string> valued);

EngineOptions read_engine_options(const Args& args, int64_t default_max_num_seqs);
engine::EngineConfig make_engine_config(const EngineOptions& o, const Args& args, const model::Model& model);

}  // namespace strata::cli
