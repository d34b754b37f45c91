#include "router/policy.h"

namespace strata::router {

const char* policy_name(Policy policy) {
  switch (policy) {
    case Policy::RoundRobin: return "round_robin";
    case Policy::LeastLoad: return "least_load";
    case Policy::CacheAware: return "cache_aware";
  }
  return "?";
}

std::optional<Policy> parse_policy(const std::string& name) {
  for (Policy p : {Policy::RoundRobin, Policy::LeastLoad, Policy::CacheAware})
    if (name == policy_name(p)) return p;
  return std::nullopt;
}

const char* reason_name(Reason reason) {
  switch (reason) {
    case Reason::RoundRobin: return "round_robin";
    case Reason::LeastLoad: return "least_load";
    case Reason::CacheHit: return "cache_hit";
    case Reason::CacheMiss: return "cache_miss";
    case Reason::CacheOverloaded: return "cache_overloaded";
    case Reason::CacheKey: return "cache_key";
    case Reason::CacheKeyOverloaded: return "cache_key_overloaded";
    case Reason::NoReplica: return "no_replica";
    case Reason::Saturated: return "saturated";
  }
  return "?";
}

double ReplicaLoad::load() const {
  return static_cast<double>(in_flight + waiting) + static_cast<double>(queued_prefill_tokens) / kPrefillTokensPerRequest;
}

std::optional<size_t> least_loaded(const std::vector<ReplicaLoad>& replicas) {
  std::optional<size_t> best;
  for (size_t i = 0; i < replicas.size(); ++i) {
    const ReplicaLoad& r = replicas[i];
    if (!r.eligible || r.saturated) continue;
    if (!best) {
      best = i;
      continue;
    }
    const ReplicaLoad& b = replicas[*best];
    if (r.load() < b.load() || (r.load() == b.load() && r.free_blocks > b.free_blocks)) best = i;
  }
  return best;
}

Decision choose_replica(const PolicyInput& in) {
  const std::vector<ReplicaLoad>& rs = in.replicas;
  bool any_eligible = false;
  for (const ReplicaLoad& r : rs) any_eligible = any_eligible || r.eligible;
  if (!any_eligible) return {std::nullopt, Reason::NoReplica};
  const std::optional<size_t> least = least_loaded(rs);
  if (!least) return {std::nullopt, Reason::Saturated};
  const double floor = rs[*least].load();
  const auto usable = [&](size_t i) { return i < rs.size() && rs[i].eligible && !rs[i].saturated; };

  if (in.policy == Policy::RoundRobin) {
    for (size_t k = 0; k < rs.size(); ++k) {
      const size_t i = (in.round_robin_next + k) % rs.size();
      if (usable(i)) return {i, Reason::RoundRobin};
    }
    return {std::nullopt, Reason::Saturated};  // unreachable: `least` is usable
  }
  bool key_passed_over = false;
  if (in.sticky) {
    if (usable(*in.sticky) && rs[*in.sticky].load() <= floor + in.cache_threshold) return {*in.sticky, Reason::CacheKey};
    key_passed_over = true;
  }
  Decision d{least, Reason::LeastLoad};
  if (in.policy == Policy::CacheAware && in.hashed) {
    std::optional<size_t> holder;  // the longest prefix; among equals, the least loaded
    for (size_t i = 0; i < rs.size(); ++i) {
      if (!usable(i) || rs[i].matched_blocks == 0) continue;
      if (!holder || rs[i].matched_blocks > rs[*holder].matched_blocks ||
          (rs[i].matched_blocks == rs[*holder].matched_blocks && rs[i].load() < rs[*holder].load()))
        holder = i;
    }
    if (!holder) d.reason = Reason::CacheMiss;
    else if (rs[*holder].load() > floor + in.cache_threshold) d.reason = Reason::CacheOverloaded;
    else d = {holder, Reason::CacheHit};
  }
  if (key_passed_over) d.reason = Reason::CacheKeyOverloaded;
  return d;
}

}  // namespace strata::router
