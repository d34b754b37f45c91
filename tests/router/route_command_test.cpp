// `strata route` as a process in front of scripted replicas (tests/router/scripted_replica.h): its flags and
// config file, its own error answers, what it sends a PD pair's decode replica, retries before the first byte,
// and 429 when every replica is saturated. No model is loaded, so these run in a few seconds.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "cli/run_strata.h"
#include "router/route_harness.h"
#include "router/scripted_replica.h"

namespace strata::test {
namespace {

const std::string kCompletion = R"({"id":"x","object":"text_completion","choices":[]})";

ScriptedReplica::Answer ok_answer(const ScriptedRequest&) { return {ScriptedReplica::json_response(200, kCompletion)}; }

std::string completion_request(const std::string& extra = "") {
  return http_request("POST", "/v1/completions", R"({"prompt":[1,2,3],"max_tokens":1)" + extra + "}");
}

TEST(RouteCli, HelpAndBadInputNameTheProblem) {
  const Outcome help = run_strata({"route", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("example"), std::string::npos);
  const auto refuses = [](std::vector<std::string> args, const std::string& says) {
    args.insert(args.begin(), "route");
    const Outcome o = run_strata(args);
    EXPECT_EQ(o.code, 1) << o.err;
    EXPECT_NE(o.err.find(says), std::string::npos) << "expected '" << says << "' in: " << o.err;
  };
  refuses({}, "no replicas: give --backend URL");
  refuses({"--backend"}, "--backend needs a URL");
  refuses({"--backend", "https://x:1", "--policy", "least_load"}, "--backend https://x:1: url: expected http://HOST:PORT");
  refuses({"--backend", "http://127.0.0.1:1", "--policy", "fastest"}, "--policy: expected cache_aware, least_load or round_robin");
  refuses({"--prefill", "http://127.0.0.1:1", "--policy", "least_load"}, "--prefill needs at least one --decode");
  refuses({"--backend", "http://127.0.0.1:1", "--backend", "http://127.0.0.1:1/", "--policy", "least_load"},
          "the same replica is given twice");
  refuses({"--backend", "http://127.0.0.1:1", "--health-interval", "0"}, "--health-interval: expected seconds > 0");
  refuses({"--backend", "http://127.0.0.1:1", "--policy", "round_robin", "--model", "/x"}, "only --policy cache_aware");
  const std::string dir = temp_dir("route_config");
  std::ofstream(dir + "/bad.json") << "{\"backend\": [\"http://127.0.0.1:1\"], \"polcy\": \"least_load\"}";
  refuses({"--config", dir + "/bad.json"}, "unknown option \"polcy\"");
  std::ofstream(dir + "/broken.json") << "{\"backend\": ";
  refuses({"--config", dir + "/broken.json"}, "not valid JSON");
  std::ofstream(dir + "/urls.json") << "{\"backend\": [1]}";
  refuses({"--config", dir + "/urls.json"}, "must list URLs as strings");
  refuses({"--config", dir + "/missing.json"}, "cannot read the file");
}

TEST(RouteCli, ConfigFileReplicasAndOptionsAndTheRoutersOwnErrors) {
  ScriptedReplica a(ok_answer), b(ok_answer);
  const std::string dir = temp_dir("route_config_ok");
  std::ofstream(dir + "/route.json") << "{\"backend\": [\"" << a.url() << "\", \"" << b.url()
                                     << "\"], \"policy\": \"round_robin\", \"health-interval\": 0.2}";
  RouterProcess router({"--config", dir + "/route.json"});
  ASSERT_NE(router.port(), 0) << router.child.output;
  for (int i = 0; i < 4; ++i) {
    HttpTestClient c(router.port());
    c.send(completion_request());
    const HttpReply r = c.read_reply();
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body, kCompletion);
  }
  EXPECT_EQ(a.completions().size(), 2u);  // round robin: two each
  EXPECT_EQ(b.completions().size(), 2u);
  EXPECT_EQ(router_metric(router.port(), "strata_router_decisions_total", "reason=\"round_robin\""), 4);

  HttpTestClient c(router.port());
  c.send(http_request("POST", "/v1/completions", R"({"prompt":[1],"max_tokens":"many"})"));
  HttpReply r = c.read_reply();
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.json()["error"]["param"], "max_tokens") << r.body;
  c.send(http_request("GET", "/v2/nothing"));
  r = c.read_reply();
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(r.json()["error"]["message"].is_string());
  EXPECT_EQ(a.completions().size() + b.completions().size(), 4u);  // neither reached a replica
  r = http_get(router.port(), "/health");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json()["healthy_replicas"], 2);

  // Large bodies are parsed off the I/O thread: answered the same way, passed on byte for byte.
  nlohmann::json big = {{"prompt", std::vector<int32_t>(6000, 1234)}, {"max_tokens", 1}};
  c.send(http_request("POST", "/v1/completions", big.dump()));
  r = c.read_reply();
  EXPECT_EQ(r.status, 200) << r.body;
  const std::vector<ScriptedRequest> got = a.completions().size() == 3 ? a.completions() : b.completions();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got.back().body, big.dump());
  big["max_tokens"] = -1;
  c.send(http_request("POST", "/v1/completions", big.dump()));
  r = c.read_reply();
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json()["error"]["param"], "max_tokens");
}

TEST(RouteCli, DecodeReplicasAreToldTheLeastLoadedHealthyPrefillReplica) {
  ScriptedReplica decode(ok_answer), prefill(ok_answer), colocated(ok_answer);
  RouterProcess router({"--decode", decode.url(), "--prefill", prefill.url(), "--backend", colocated.url(), "--policy",
                        "round_robin", "--health-interval", "0.1", "--health-timeout", "0.5", "--eject-after", "1"});
  ASSERT_NE(router.port(), 0) << router.child.output;
  for (int i = 0; i < 4; ++i) {
    HttpTestClient c(router.port());
    c.send(completion_request());
    EXPECT_EQ(c.read_reply().status, 200);
  }
  ASSERT_EQ(decode.completions().size(), 2u);
  ASSERT_EQ(colocated.completions().size(), 2u);
  EXPECT_TRUE(prefill.completions().empty());  // a prefill replica is never sent a request itself
  for (const ScriptedRequest& r : decode.completions()) EXPECT_EQ(r.headers.at("x-strata-prefill"), prefill.url());
  for (const ScriptedRequest& r : colocated.completions()) EXPECT_EQ(r.headers.count("x-strata-prefill"), 0u);

  // With the prefill replica gone, the decode replica is sent the request without the header (it prefills itself).
  prefill.stop();
  ASSERT_TRUE(eventually([&] { return router_metric(router.port(), "strata_router_replica_healthy",
                                                    replica_labels(prefill.url(), "prefill")) == 0; },
                         10 * patience()));
  for (int i = 0; i < 2; ++i) {
    HttpTestClient c(router.port());
    c.send(completion_request());
    EXPECT_EQ(c.read_reply().status, 200);
  }
  ASSERT_EQ(decode.completions().size(), 3u);
  EXPECT_EQ(decode.completions().back().headers.count("x-strata-prefill"), 0u);
}

TEST(RouteCli, SpareConnectionsAreOpenedAheadSoARequestNeedNotConnect) {
  ScriptedReplica replica(ok_answer);
  const std::string labels = replica_labels(replica.url(), "backend");
  {
    RouterProcess router({"--backend", replica.url(), "--health-interval", "0.1", "--spare-connections", "3"});
    ASSERT_NE(router.port(), 0) << router.child.output;
    // Once the replica is up, three connections wait for requests.
    ASSERT_TRUE(eventually([&] { return router_metric(router.port(), "strata_router_replica_preconnects_total", labels) == 3; },
                           10 * patience()));
    for (int i = 0; i < 5; ++i) {
      HttpTestClient c(router.port());
      c.send(completion_request());
      EXPECT_EQ(c.read_reply().status, 200);
    }
    EXPECT_EQ(router_metric(router.port(), "strata_router_replica_connects_total", labels), 0);
    EXPECT_EQ(replica.completions().size(), 5u);
  }
  // Without spares the first request connects itself; the connection is kept for the next ones.
  RouterProcess router({"--backend", replica.url(), "--health-interval", "0.1", "--spare-connections", "0"});
  ASSERT_NE(router.port(), 0) << router.child.output;
  for (int i = 0; i < 3; ++i) {
    HttpTestClient c(router.port());
    c.send(completion_request());
    EXPECT_EQ(c.read_reply().status, 200);
  }
  EXPECT_EQ(router_metric(router.port(), "strata_router_replica_connects_total", labels), 1);
  EXPECT_EQ(router_metric(router.port(), "strata_router_replica_preconnects_total", labels), 0);
}

TEST(RouteCli, RetriesBeforeTheFirstByteAndAnswers429WhenEverythingIsSaturated) {
  // `failing` accepts and then drops each request without a byte of answer (a replica dying under it); `slow` holds
  // its answers for a while.
  ScriptedReplica failing([](const ScriptedRequest&) { return ScriptedReplica::Answer{"", std::chrono::milliseconds(0)}; });
  ScriptedReplica slow([](const ScriptedRequest&) {
    return ScriptedReplica::Answer{ScriptedReplica::json_response(200, kCompletion), std::chrono::milliseconds(1500)};
  });
  RouterProcess router({"--backend", failing.url(), "--backend", slow.url(), "--policy", "round_robin",
                        "--max-in-flight", "1", "--health-interval", "0.2", "--eject-after", "100"});
  ASSERT_NE(router.port(), 0) << router.child.output;
  // Round robin sends the first request to `failing`, which drops it: it is retried on `slow` and stays open there.
  // The second request fails on `failing` too and then finds `slow` saturated (one open request): 429.
  std::atomic<int> first_status{0};
  std::thread first([&] {
    HttpTestClient c(router.port());
    c.send(completion_request());
    first_status = c.read_reply().status;
  });
  ASSERT_TRUE(eventually([&] { return slow.completions().size() == 1; }, 10 * patience()));
  HttpTestClient c(router.port());
  c.send(completion_request());
  const HttpReply second = c.read_reply();
  first.join();
  EXPECT_EQ(first_status.load(), 200);
  EXPECT_EQ(second.status, 429) << second.body;
  EXPECT_EQ(second.headers.count("retry-after"), 1u);
  EXPECT_EQ(second.json()["error"]["code"], "replicas_saturated");
  EXPECT_GE(router_metric(router.port(), "strata_router_retries_total"), 1);
  EXPECT_EQ(slow.max_open(), 1);  // --max-in-flight held
}

}  // namespace
}  // namespace strata::test
