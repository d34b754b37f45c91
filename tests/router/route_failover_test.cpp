// `strata route` in front of real `strata serve` replicas of the tests' tiny model (issue 15's router tests): a
// replica killed with SIGKILL under a load of streams (every request completes or ends with a clear error, none
// hangs, new requests go to the survivor, the replica rejoins when restarted), a wedged replica (SIGSTOP) ejected
// within a bounded time, and cache-aware routing sending repeated prefixes to the replica that holds them.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "router/route_harness.h"

namespace strata::test {
namespace {

// A /v1/completions body over token ids (the tests' model has the DeepSeek vocabulary; ids from 1000 are text).
std::string completion_body(const std::vector<int32_t>& ids, int64_t max_tokens, bool stream) {
  nlohmann::json body = {{"model", "m"}, {"prompt", ids}, {"max_tokens", max_tokens}, {"ignore_eos", true},
                         {"stream", stream}};
  return body.dump();
}

std::vector<int32_t> ids_from(int32_t first, int64_t n) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(first + static_cast<int32_t>(i));
  return ids;
}

struct StreamResult {
  int status = 0;
  std::string body, replica, exception;
};

// Streams `n` requests through the router at once, each on its own connection; `first_bytes` counts those whose
// first event has arrived. Every read is bounded, so a hung request shows as an exception, not a hung test.
std::vector<std::thread> start_streams(uint16_t port, int n, int64_t max_tokens, std::vector<StreamResult>& results,
                                       std::atomic<int>& first_bytes) {
  results.assign(static_cast<size_t>(n), {});
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i, port, max_tokens] {
      StreamResult& r = results[static_cast<size_t>(i)];
      try {
        HttpTestClient c(port);
        c.send(http_request("POST", "/v1/completions", completion_body(ids_from(1000 + 10 * i, 16), max_tokens, true)));
        if (c.wait_for("data: ", 60 * patience())) ++first_bytes;
        const HttpReply reply = c.read_reply(60 * patience());
        r.status = reply.status;
        r.body = reply.body;
        r.replica = reply.headers.count("x-strata-replica") ? reply.headers.at("x-strata-replica") : "";
      } catch (const std::exception& e) {
        r.exception = e.what();
      }
    });
  return threads;
}

bool completed(const StreamResult& r) { return r.status == 200 && r.body.find("data: [DONE]") != std::string::npos; }
bool clear_error(const StreamResult& r) {
  return r.status == 200 && r.body.find("data: {\"error\"") != std::string::npos &&
         r.body.find("replica_failed") != std::string::npos && r.body.find("[DONE]") == std::string::npos;
}

HttpReply complete_once(uint16_t port, const std::vector<int32_t>& ids) {
  HttpTestClient c(port);
  c.send(http_request("POST", "/v1/completions", completion_body(ids, 1, false)));
  return c.read_reply(60 * patience());
}

TEST(RouteFailover, KilledReplicaFailsItsStreamsClearlyAndRejoinsWhenRestarted) {
  if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  Replica r1, r2;
  ASSERT_NE(r1.port(), 0) << r1.child.output;
  ASSERT_NE(r2.port(), 0) << r2.child.output;
  RouterProcess router({"--backend", r1.url(), "--backend", r2.url(), "--policy", "least_load", "--health-interval",
                        "0.2", "--health-timeout", "1", "--readmit-after", "2"});
  ASSERT_NE(router.port(), 0) << router.child.output;

  const int n = kSanitized ? 4 : 8;
  std::vector<StreamResult> results;
  std::atomic<int> first_bytes{0};
  std::vector<std::thread> streams = start_streams(router.port(), n, kSanitized ? 60 : 120, results, first_bytes);
  const bool all_streaming = eventually([&] { return first_bytes.load() == n; }, 60 * patience());
  ::kill(r1.child.pid, SIGKILL);  // mid-stream: least load spread the streams over both replicas
  for (std::thread& t : streams) t.join();
  EXPECT_TRUE(all_streaming) << first_bytes.load() << " of " << n << " streams had begun";
  int done = 0, errors = 0;
  for (const StreamResult& r : results) {
    EXPECT_TRUE(r.exception.empty()) << "a request hung or was cut without an answer: " << r.exception;
    if (completed(r)) {
      ++done;
      EXPECT_EQ(r.replica, r2.url());
    } else if (clear_error(r)) {
      ++errors;
      EXPECT_EQ(r.replica, r1.url());
    } else {
      ADD_FAILURE() << "neither completed nor a clear error: HTTP " << r.status << "\n" << r.body.substr(0, 2000);
    }
  }
  EXPECT_GE(done, 1);
  EXPECT_GE(errors, 1);
  EXPECT_EQ(r1.child.wait_exit(10), -1);  // reaped (killed by the signal)

  // New requests go to the survivor (the dead replica is ejected, or refuses the connection and is retried around).
  for (int i = 0; i < 3; ++i) {
    const HttpReply reply = complete_once(router.port(), ids_from(3000, 8));
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.headers.at("x-strata-replica"), r2.url());
  }
  EXPECT_EQ(router_metric(router.port(), "strata_router_replica_healthy", replica_labels(r1.url())), 0);
  EXPECT_GE(router_metric(router.port(), "strata_router_replica_ejections_total", replica_labels(r1.url())), 1);

  // Restarted on its port, it is re-admitted and takes requests again (idle replicas tie: the first one wins).
  Replica again(r1.port());
  ASSERT_EQ(again.port(), r1.port()) << again.child.output;
  EXPECT_TRUE(eventually([&] { return router_metric(router.port(), "strata_router_replica_healthy", replica_labels(r1.url())) == 1; },
                         30 * patience()));
  EXPECT_EQ(router_metric(router.port(), "strata_router_replica_readmissions_total", replica_labels(r1.url())), 1);
  const HttpReply reply = complete_once(router.port(), ids_from(4000, 8));
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers.at("x-strata-replica"), r1.url());
}

TEST(RouteFailover, WedgedReplicaIsEjectedWithinBoundedTimeAndItsStreamEndsWithAnError) {
  if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  Replica r1, r2;
  ASSERT_NE(r1.port(), 0) << r1.child.output;
  ASSERT_NE(r2.port(), 0) << r2.child.output;
  RouterProcess router({"--backend", r1.url(), "--backend", r2.url(), "--policy", "least_load", "--health-interval",
                        "0.2", "--health-timeout", "0.5", "--eject-after", "2", "--readmit-after", "1"});
  ASSERT_NE(router.port(), 0) << router.child.output;

  std::vector<StreamResult> results;
  std::atomic<int> first_bytes{0};
  std::vector<std::thread> streams = start_streams(router.port(), 2, kSanitized ? 60 : 120, results, first_bytes);
  const bool both_streaming = eventually([&] { return first_bytes.load() == 2; }, 60 * patience());
  ::kill(r2.child.pid, SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  // Checks every 0.2 s that time out after 0.5 s, two in a row: ejected about 1.5 s after the stop. The bound leaves
  // room for a slow machine.
  const bool ejected = eventually(
      [&] { return router_metric(router.port(), "strata_router_replica_healthy", replica_labels(r2.url())) == 0; },
      10 * patience());
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  for (std::thread& t : streams) t.join();
  EXPECT_TRUE(both_streaming);
  EXPECT_TRUE(ejected) << "not ejected " << took << " s after SIGSTOP";
  EXPECT_LT(took, 5 * patience());
  int errors = 0;
  for (const StreamResult& r : results) {
    EXPECT_TRUE(r.exception.empty()) << r.exception;
    if (r.replica == r2.url()) {
      EXPECT_TRUE(clear_error(r)) << r.body.substr(0, 2000);
      errors += clear_error(r);
    } else {
      EXPECT_TRUE(completed(r)) << r.body.substr(0, 2000);
    }
  }
  EXPECT_EQ(errors, 1);  // least load put one stream on each
  const HttpReply reply = complete_once(router.port(), ids_from(5000, 8));
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers.at("x-strata-replica"), r1.url());
  ::kill(r2.child.pid, SIGCONT);
  // Woken up, it answers its checks again and is re-admitted.
  EXPECT_TRUE(eventually([&] { return router_metric(router.port(), "strata_router_replica_healthy", replica_labels(r2.url())) == 1; },
                         30 * patience()));
}

// Rounds of requests over three 300-token prefixes (each request with its own 8-token tail), one at a time: how many
// requests of the later rounds found their prefix cached on the replica they were sent to, and where each went.
struct PrefixRounds {
  int hits = 0;
  std::vector<std::string> replicas;  // in order
};

PrefixRounds run_prefix_rounds(uint16_t port, int32_t first_id, int rounds) {
  PrefixRounds out;
  for (int round = 0; round < rounds; ++round)
    for (int p = 0; p < 3; ++p) {
      std::vector<int32_t> ids = ids_from(first_id + 1000 * p, 300);
      const std::vector<int32_t> tail = ids_from(first_id + 500 + 10 * round + 1000 * p, 8);
      ids.insert(ids.end(), tail.begin(), tail.end());
      const HttpReply reply = complete_once(port, ids);
      EXPECT_EQ(reply.status, 200) << reply.body;
      if (reply.status != 200) continue;
      const int64_t cached = reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
      if (round > 0 && cached >= 256) ++out.hits;  // the prefix's two whole 128-token blocks
      out.replicas.push_back(reply.headers.at("x-strata-replica"));
    }
  return out;
}

TEST(RouteCacheAware, RepeatedPrefixesGoWhereTheirBlocksLive) {
  if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  Replica r1, r2;
  ASSERT_NE(r1.port(), 0) << r1.child.output;
  ASSERT_NE(r2.port(), 0) << r2.child.output;
  const int rounds = kSanitized ? 2 : 3;
  PrefixRounds aware, robin;
  {
    RouterProcess router({"--backend", r1.url(), "--backend", r2.url(), "--policy", "cache_aware", "--model",
                          served_model_dir(), "--health-interval", "0.2"});
    ASSERT_NE(router.port(), 0) << router.child.output;
    aware = run_prefix_rounds(router.port(), 10000, rounds);
    // Every later request was placed by the index (the router's hashes are the cache's), and hit.
    EXPECT_EQ(router_metric(router.port(), "strata_router_decisions_total", "reason=\"cache_hit\""), 3 * (rounds - 1));
    EXPECT_EQ(aware.hits, 3 * (rounds - 1));
    for (size_t i = 3; i < aware.replicas.size(); ++i) EXPECT_EQ(aware.replicas[i], aware.replicas[i % 3]);
  }
  {
    // The baseline on the same replicas, with prefixes they have not seen: round robin alternates, so a prefix's
    // next request lands on the other replica every other round.
    RouterProcess router({"--backend", r1.url(), "--backend", r2.url(), "--policy", "round_robin", "--health-interval", "0.2"});
    ASSERT_NE(router.port(), 0) << router.child.output;
    robin = run_prefix_rounds(router.port(), 40000, rounds);
  }
  EXPECT_LT(robin.hits, aware.hits);
}

}  // namespace
}  // namespace strata::test
