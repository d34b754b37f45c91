#pragma once
// The engine flags `strata serve` and offline `strata generate --input` share: --max-num-seqs,
// --max-num-batched-tokens, --state-memory (read before the model loads, so a bad flag fails fast) and
// --max-model-len (checked against the loaded model).
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
};

// The prefix-cache flags both commands take (valued options), and their help text.
extern const std::set<std::string> kCacheOptions;
extern const char* const kCacheOptionsHelp;
std::set<std::string> with_cache_options(std::set<std::string> valued);

EngineOptions read_engine_options(const Args& args, int64_t default_max_num_seqs);
engine::EngineConfig make_engine_config(const EngineOptions& o, const Args& args, const model::Model& model);

}  // namespace strata::cli
