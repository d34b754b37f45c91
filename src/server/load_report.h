#pragma once
// A replica's load report, GET /strata/v1/load (open, like /health): what a router (src/router/) needs to place a
// request — the engine's queue (running and waiting sequences, prompt tokens not yet prefilled), its state pool
// (free, total and kept token blocks) and the prefix cache's hashing (block size, mode, the salt of the shared
// scope), so the router can compute the very block hashes the cache keys prefixes by.
//
// One struct, both directions: the server builds the body from it, the router parses it back.
#include <cstdint>
#include <optional>
#include <string>

#include "disagg/replica_role.h"
#include "engine/engine.h"
#include "model/token_blocks.h"

namespace strata::server {

struct LoadReport {
  disagg::Role role = disagg::Role::Both;  // what the replica does (disagg/replica_role.h)
  int64_t running = 0, waiting = 0;
  int64_t free_blocks = 0, total_blocks = 0, kept_blocks = 0;  // free counts the kept ones (they are reclaimable)
  int64_t queued_prefill_tokens = 0;
  int64_t requests_in_flight = 0;  // HTTP completion requests being prepared or generated
  int64_t block_tokens = 0;        // tokens per token block (and per cached block)
  bool cache_enabled = false;
  std::string cache_mode;          // "exact" | "replay" (when enabled)
  model::BlockHash cache_salt;     // PrefixCache::salt("") (when enabled)
};

// The report of an engine: `stats` as of its last step, the pool's size (`total_blocks`, known before any step), the
// prefix cache (null: off) and the model's token-block size.
LoadReport make_load_report(const engine::EngineStats& stats, int64_t total_blocks, const cache::PrefixCache* cache,
                            int64_t block_tokens, int64_t requests_in_flight);

// The JSON body: {"role":"both"|"prefill"|"decode","running":N,"waiting":N,"free_blocks":N,"total_blocks":N,"kept_blocks":N,
// "queued_prefill_tokens":N,"requests_in_flight":N,"block_tokens":B,"cache":{"enabled":bool,"mode":M,"salt":HEX}}.
std::string load_report_body(const LoadReport& report);
// The body parsed back; throws strata::Error naming the field that is missing or of the wrong type.
LoadReport parse_load_report(const std::string& body);

// A block hash as 32 lowercase hex digits (high word first), and back (nullopt unless exactly that).
std::string block_hash_hex(const model::BlockHash& hash);
std::optional<model::BlockHash> parse_block_hash_hex(const std::string& text);

}  // namespace strata::server
