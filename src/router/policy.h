#pragma once
// Where a request goes: the routing policies as a pure function of plain data (each replica's load, what the prefix
// index says it holds of the request, the prompt_cache_key's sticky replica), so the choice is testable without a
// network.
//
// Load (lower is better): the router's own requests open on the replica (live and exact), plus the sequences the
// replica reports waiting (a queue the router cannot see: memory pressure, other clients), plus its queued prefill
// tokens in units of kPrefillTokensPerRequest (a backlog of long prompts weighs more than the same count of short
// ones). Ties go to the replica with more free state blocks, then to the lower index.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::router {

enum class Policy { RoundRobin, LeastLoad, CacheAware };
const char* policy_name(Policy policy);                    // "round_robin", "least_load", "cache_aware"
std::optional<Policy> parse_policy(const std::string& name);

// A queued prefill of this many tokens weighs as much as one more request in flight.
inline constexpr double kPrefillTokensPerRequest = 4096;

struct ReplicaLoad {
  bool eligible = false;   // healthy, a request target, and not already tried by this request
  bool saturated = false;  // over --max-in-flight or --max-waiting: takes no new request
  int64_t in_flight = 0, waiting = 0, queued_prefill_tokens = 0, free_blocks = 0;
  int64_t matched_blocks = 0;  // cache-aware: leading blocks of the request the prefix index places here
  double load() const;
};

struct PolicyInput {
  Policy policy = Policy::LeastLoad;
  std::vector<ReplicaLoad> replicas;
  bool hashed = true;             // cache_aware: the request's prompt blocks are known (matched_blocks mean something)
  std::optional<size_t> sticky;   // the replica the request's prompt_cache_key went to before
  size_t round_robin_next = 0;    // round robin: the first index to consider
  double cache_threshold = 8;     // a holder is passed over when its load exceeds the least load by more
};

// Why a replica was picked (or none), as /metrics counts decisions.
enum class Reason {
  RoundRobin,        // round robin's turn
  LeastLoad,         // least_load, or cache_aware with a request it cannot hash (no cache report yet, a grammar, ...)
  CacheHit,          // cache_aware: the replica holding the longest prefix
  CacheMiss,         // cache_aware: no replica holds a block of it; the least loaded
  CacheOverloaded,   // cache_aware: the holder is loaded beyond the threshold; the least loaded
  CacheKey,          // prompt_cache_key: the replica the key went to before
  CacheKeyOverloaded,  // that replica is loaded beyond the threshold (or gone); the policy's pick
  NoReplica,         // no eligible replica
  Saturated,         // every eligible replica is saturated
};
const char* reason_name(Reason reason);

struct Decision {
  std::optional<size_t> replica;
  Reason reason = Reason::NoReplica;
};

Decision choose_replica(const PolicyInput& input);

// The eligible, unsaturated replica with the least load (ties: more free blocks, then the lower index).
std::optional<size_t> least_loaded(const std::vector<ReplicaLoad>& replicas);

}  // namespace strata::router
