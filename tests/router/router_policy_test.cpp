// The router's pure parts: the policies' choices, the prefix index, and the load report both ways.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/token_blocks.h"
#include "router/policy.h"
#include "router/prefix_index.h"
#include "router/router_metrics.h"
#include "server/load_report.h"

namespace strata::router {
namespace {

std::vector<model::BlockHash> chain(int64_t blocks, int32_t first_token) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < blocks * 4; ++i) tokens.push_back(first_token + static_cast<int32_t>(i));
  return model::block_hashes({1, 2}, tokens, 4);
}

ReplicaLoad replica(int64_t in_flight, int64_t matched = 0) {
  ReplicaLoad r;
  r.eligible = true;
  r.in_flight = in_flight;
  r.matched_blocks = matched;
  return r;
}

TEST(RouterPolicy, LeastLoadCountsWaitingAndQueuedPrefillAndBreaksTiesByFreeBlocks) {
  PolicyInput in;
  in.policy = Policy::LeastLoad;
  in.replicas = {replica(3), replica(2), replica(2)};
  in.replicas[1].waiting = 2;  // 4 in all
  EXPECT_EQ(choose_replica(in).replica, 2u);
  in.replicas[2].queued_prefill_tokens = static_cast<int64_t>(kPrefillTokensPerRequest) * 2;  // 4 as well
  in.replicas[0].free_blocks = 1;
  EXPECT_EQ(choose_replica(in).replica, 0u);
  EXPECT_EQ(choose_replica(in).reason, Reason::LeastLoad);
}

TEST(RouterPolicy, RoundRobinSkipsIneligibleAndSaturatedReplicas) {
  PolicyInput in;
  in.policy = Policy::RoundRobin;
  in.replicas = {replica(0), replica(9), replica(0)};
  in.round_robin_next = 1;
  EXPECT_EQ(choose_replica(in).replica, 1u);  // the turn, whatever the load
  in.replicas[1].saturated = true;
  EXPECT_EQ(choose_replica(in).replica, 2u);
  in.replicas[2].eligible = false;
  EXPECT_EQ(choose_replica(in).replica, 0u);
}

TEST(RouterPolicy, NoEligibleReplicaAndAllSaturatedAreDifferentAnswers) {
  PolicyInput in;
  in.replicas = {replica(1), replica(1)};
  in.replicas[0].eligible = in.replicas[1].eligible = false;
  EXPECT_EQ(choose_replica(in).reason, Reason::NoReplica);
  EXPECT_FALSE(choose_replica(in).replica);
  in.replicas[0].eligible = in.replicas[1].eligible = true;
  in.replicas[0].saturated = in.replicas[1].saturated = true;
  EXPECT_EQ(choose_replica(in).reason, Reason::Saturated);
  EXPECT_FALSE(choose_replica(in).replica);
}

TEST(RouterPolicy, CacheAwareFollowsTheLongestPrefixUnlessItsHolderIsOverloaded) {
  PolicyInput in;
  in.policy = Policy::CacheAware;
  in.cache_threshold = 4;
  in.replicas = {replica(0, 1), replica(3, 5), replica(1, 0)};
  Decision d = choose_replica(in);
  EXPECT_EQ(d.replica, 1u);
  EXPECT_EQ(d.reason, Reason::CacheHit);
  in.replicas[1].in_flight = 5;  // 5 > 0 + 4: passed over for the least loaded
  d = choose_replica(in);
  EXPECT_EQ(d.replica, 0u);
  EXPECT_EQ(d.reason, Reason::CacheOverloaded);
  in.replicas[0].matched_blocks = in.replicas[1].matched_blocks = 0;
  d = choose_replica(in);
  EXPECT_EQ(d.replica, 0u);
  EXPECT_EQ(d.reason, Reason::CacheMiss);
  in.hashed = false;  // a request it could not hash: plain least load
  EXPECT_EQ(choose_replica(in).reason, Reason::LeastLoad);
}

TEST(RouterPolicy, PromptCacheKeyIsStickyWithinTheThreshold) {
  PolicyInput in;
  in.policy = Policy::LeastLoad;
  in.cache_threshold = 2;
  in.replicas = {replica(0), replica(2)};
  in.sticky = 1;
  Decision d = choose_replica(in);
  EXPECT_EQ(d.replica, 1u);
  EXPECT_EQ(d.reason, Reason::CacheKey);
  in.replicas[1].in_flight = 3;
  d = choose_replica(in);
  EXPECT_EQ(d.replica, 0u);
  EXPECT_EQ(d.reason, Reason::CacheKeyOverloaded);
  in.replicas[1].in_flight = 0;
  in.replicas[1].eligible = false;  // ejected: the key moves
  EXPECT_EQ(choose_replica(in).replica, 0u);
}

TEST(PrefixIndex, MatchesLeadingBlocksPerReplica) {
  PrefixIndex index(100);
  const auto a = chain(4, 0), b = chain(4, 1000);
  index.insert(a, 0);
  index.insert({a[0], a[1]}, 2);
  index.insert(b, 1);
  EXPECT_EQ(index.matched_blocks(a, 3), (std::vector<int64_t>{4, 0, 2}));
  EXPECT_EQ(index.matched_blocks(b, 3), (std::vector<int64_t>{0, 4, 0}));
  // A chain counts from its first block: holding block 1 without block 0 is no match.
  index.insert({b[1]}, 0);
  EXPECT_EQ(index.matched_blocks(b, 3)[0], 0);
  index.forget_replica(0);
  EXPECT_EQ(index.matched_blocks(a, 3), (std::vector<int64_t>{0, 0, 2}));
}

TEST(PrefixIndex, ForgetsTheLeastRecentlySentBlocksBeyondItsCapacity) {
  PrefixIndex index(6);
  const auto a = chain(4, 0), b = chain(4, 1000);
  index.insert(a, 0);
  index.insert(b, 1);  // 8 blocks known: a's first two are the oldest
  EXPECT_EQ(index.size(), 6u);
  EXPECT_EQ(index.matched_blocks(a, 2)[0], 0);
  EXPECT_EQ(index.matched_blocks(b, 2)[1], 4);
  index.insert({b[0]}, 1);  // sent again: b[0] is now the newest, b[1] the oldest of b's blocks
  index.insert(chain(3, 5000), 0);  // 3 more blocks push out a[2], a[3] and b[1]
  EXPECT_EQ(index.matched_blocks(b, 2)[1], 1);
  EXPECT_EQ(index.size(), 6u);
  EXPECT_THROW(index.insert(a, PrefixIndex::kMaxReplicas), Error);
}

TEST(LoadReport, RoundTripsAndNamesWhatIsWrong) {
  server::LoadReport r;
  r.running = 3;
  r.waiting = 1;
  r.free_blocks = 10;
  r.total_blocks = 12;
  r.kept_blocks = 4;
  r.queued_prefill_tokens = 700;
  r.requests_in_flight = 4;
  r.block_tokens = 128;
  r.cache_enabled = true;
  r.cache_mode = "replay";
  r.cache_salt = {0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  const std::string body = server::load_report_body(r);
  EXPECT_NE(body.find(R"("salt":"fedcba98765432100123456789abcdef")"), std::string::npos) << body;
  const server::LoadReport back = server::parse_load_report(body);
  EXPECT_EQ(back.queued_prefill_tokens, 700);
  EXPECT_EQ(back.kept_blocks, 4);
  EXPECT_EQ(back.cache_mode, "replay");
  EXPECT_TRUE(back.cache_salt == r.cache_salt);
  const auto refused = [](const std::string& text, const std::string& says) {
    try {
      server::parse_load_report(text);
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused("[1]", "expected a JSON object");
  refused(R"({"running":-1})", "\"running\"");
  std::string no_salt = body;
  no_salt.replace(no_salt.find("fedc"), 4, "FEDC");
  refused(no_salt, "cache.salt");
  EXPECT_FALSE(server::parse_block_hash_hex("12"));
}

TEST(RouterMetrics, RendersDecisionsReplicasAndTheOverheadHistogram) {
  RouterMetrics m;
  m.decision(Reason::CacheHit);
  m.decision(Reason::CacheHit);
  m.overhead(150e-6);
  m.overhead(3e-3);
  ReplicaMetrics r;
  r.url = "http://h:1";
  r.role = "backend";
  r.healthy = true;
  const std::string text = m.render({r}, Policy::CacheAware, 7);
  EXPECT_NE(text.find("strata_router_decisions_total{reason=\"cache_hit\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_router_replica_healthy{replica=\"http://h:1\",role=\"backend\"} 1\n"), std::string::npos);
  EXPECT_EQ(text.find("\nstrata_router_replica_waiting{"), std::string::npos);  // no report yet: no sample
  EXPECT_NE(text.find("strata_router_overhead_seconds_bucket{le=\"0.00014\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_router_overhead_seconds_bucket{le=\"0.00016\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("strata_router_overhead_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
}

}  // namespace
}  // namespace strata::router
