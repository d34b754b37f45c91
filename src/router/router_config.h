#pragma once
// What `strata route` is given: the replicas (each a URL and a role) and how to route, check and retry.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "router/policy.h"

namespace strata::text {
class Tokenizer;
}

namespace strata::router {

enum class ReplicaRole {
  Colocated,  // --backend: prefills and decodes its own requests
  Prefill,    // --prefill: named to a decode replica in X-Strata-Prefill, never sent a request by the router
  Decode,     // --decode: takes requests; prefills them on the prefill replica the header names, or itself
};
const char* role_name(ReplicaRole role);  // "backend", "prefill", "decode"

struct ReplicaSpec {
  std::string url;  // http://HOST:PORT[/PREFIX]
  ReplicaRole role = ReplicaRole::Colocated;
};

struct RouterConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: an ephemeral port (Router::port)
  std::vector<ReplicaSpec> replicas;
  Policy policy = Policy::CacheAware;
  double cache_threshold = 8;      // cache_aware / prompt_cache_key: how much more loaded than the least a holder may be
  size_t index_blocks = 1 << 20;   // block hashes the prefix index remembers (about 100 bytes each)
  size_t cache_keys = 1 << 16;     // prompt_cache_key → replica entries remembered
  // Cache-aware hashing: prompts are tokenized as the replicas do (null: requests are routed by load only).
  const text::Tokenizer* tokenizer = nullptr;

  std::chrono::milliseconds health_interval{1000};  // between two load reports of a replica
  std::chrono::milliseconds health_timeout{2000};   // a load report slower than this is a failed check
  int eject_after = 2;    // consecutive failed checks that eject a healthy replica
  int readmit_after = 2;  // consecutive good checks that re-admit an ejected one
  std::chrono::milliseconds connect_timeout{2000};
  // Kept-alive connections per replica opened ahead of need: a request that finds every connection busy would
  // otherwise wait for a connect inside the router's own time (a handshake and, in a burst, a turn of the event
  // loop behind everything queued).
  int64_t spare_connections = 4;
  std::chrono::milliseconds request_timeout{std::chrono::minutes(10)};  // a request's whole time on a replica
  int max_attempts = 3;          // replicas a request may try before its first byte comes back
  int64_t max_in_flight = 1024;  // per replica: the router's open requests there before it counts as saturated
  int64_t max_waiting = 0;       // per replica: reported waiting sequences that saturate it (0: no limit)
  std::chrono::seconds retry_after{1};  // the Retry-After of a 429

  size_t max_body_bytes = 8u << 20;
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
};

}  // namespace strata::router
