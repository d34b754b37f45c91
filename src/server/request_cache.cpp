#include "server/request_cache.h"

#include <xxhash.h>

#include "core/error.h"

namespace strata::server {

engine::CacheOptions request_cache_options(const CompletionRequest& r, const cache::PrefixCache* cache,
                                           const std::string& key_scope) {
  engine::CacheOptions o;
  // Without a cache here the options still go to a prefill replica's (disaggregation), with the default TTLs.
  const cache::CacheConfig defaults;
  const cache::CacheConfig& config = cache ? cache->config() : defaults;
  o.scope = key_scope;
  if (!r.prompt_cache_key.empty()) o.scope += "|prompt_cache_key:" + r.prompt_cache_key;
  const bool has_tools = r.chat.contains("tools") && r.chat["tools"].is_array() && !r.chat["tools"].empty();
  const bool agent = r.cache_class.empty() ? has_tools : r.cache_class == "agent";
  o.ttl_seconds = r.cache_retention_seconds ? *r.cache_retention_seconds
                  : agent                   ? config.ttl_agent_seconds
                                            : config.ttl_chat_seconds;
  return o;
}

std::string api_key_scope(const std::string& key) {
  const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
  return cat("key:", std::hex, h.high64, ":", h.low64);
}

}  // namespace strata::server
