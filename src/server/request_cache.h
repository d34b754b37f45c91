#pragma once
// How a request uses the prefix cache (cache/prefix_cache.h): its isolation scope (the API key it came with, unless
// the cache is global, and its prompt_cache_key) and its time to live (prompt_cache_retention, else the agent TTL
// when it is agent traffic, i.e. "cache_class": "agent" or tools without a cache_class, else the chat TTL). Shared by
// the server and the offline batch runner.
#include <string>

#include "cache/prefix_cache.h"
#include "engine/sequence.h"
#include "server/openai_protocol.h"

namespace strata::server {

// `key_scope`: the tenant's part of the scope ("" for none). `cache` may be null (a decode replica without a cache
// of its own asks its prefill replica's): the default TTLs then.
engine::CacheOptions request_cache_options(const CompletionRequest& r, const cache::PrefixCache* cache,
                                           const std::string& key_scope);
// The tenant scope of an API key: a hash, so no key reaches a cache file or its name.
std::string api_key_scope(const std::string& key);

}  // namespace strata::server
