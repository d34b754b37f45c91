// Prefill/decode disaggregation as separate processes behind `strata route` (issue 15's PD tests): the answers
// through a prefill + decode pair equal a colocated replica's, over TCP and through shared memory (--transfer shared);
// a prefill replica killed in the middle of its
// transfers leaves every request to complete (its decode replica computes the prompts); a decode replica killed in
// the middle of its streams ends them with a clear error while new requests go to the surviving decode replica.
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <thread>

#include "router/route_harness.h"

namespace strata::test {
namespace {

using json = nlohmann::json;

std::vector<int32_t> prompt_ids(int64_t n, int64_t salt) {
  std::vector<int32_t> ids = token_ids(n, salt);
  for (int32_t& t : ids) t += 1000;  // ordinary tokens of the DeepSeek vocabulary
  return ids;
}

json body_of(const std::vector<int32_t>& ids, int64_t max_tokens, bool stream) {
  return {{"model", "m"}, {"prompt", ids}, {"max_tokens", max_tokens}, {"ignore_eos", true}, {"temperature", 0},
          {"logprobs", 2}, {"stream", stream}};
}

HttpReply post(uint16_t port, const json& body, double timeout_s) {
  HttpTestClient c(port);
  c.send(http_request("POST", "/v1/completions", body.dump()));
  return c.read_reply(timeout_s);
}

// A replica's own /metrics sample (`name{model_name="m",labels}`), or -1.
double replica_metric(uint16_t port, const std::string& name, const std::string& labels = "") {
  const std::string text = http_get(port, "/metrics").body;
  const std::string key = name + "{model_name=\"m\"" + (labels.empty() ? "" : "," + labels) + "} ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

bool streamed_to_the_end(const HttpReply& r) {
  return r.status == 200 && r.body.find("data: [DONE]") != std::string::npos;
}

TEST(PdProcesses, ThroughTheRouterAPairAnswersAsAColocatedReplica) {
  if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  Replica prefill(0, {"--role", "prefill"}), colocated;
  ASSERT_NE(prefill.port(), 0) << prefill.child.output;
  Replica decode(0, {"--role", "decode"});
  ASSERT_NE(decode.port(), 0) << decode.child.output;
  ASSERT_NE(colocated.port(), 0) << colocated.child.output;
  RouterProcess router({"--prefill", prefill.url(), "--decode", decode.url(), "--policy", "least_load",
                        "--health-interval", "0.2"});
  ASSERT_NE(router.port(), 0) << router.child.output;
  ASSERT_TRUE(eventually([&] { return http_get(router.port(), "/health").status == 200; }, 30 * patience()));

  const int n = kSanitized ? 3 : 6;
  std::vector<json> bodies;
  for (int i = 0; i < n; ++i) bodies.push_back(body_of(prompt_ids(20 + 60 * i, i), 6, i % 2 == 1));
  std::vector<HttpReply> pd(bodies.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < bodies.size(); ++i)
    threads.emplace_back([&, i] { pd[i] = post(router.port(), bodies[i], 120 * patience()); });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < bodies.size(); ++i) {
    const HttpReply want = post(colocated.port(), bodies[i], 120 * patience());
    ASSERT_EQ(pd[i].status, 200) << pd[i].body;
    if (bodies[i]["stream"]) {  // the streamed events are equal but for ids and timestamps: compare their choices
      const auto choices = [](const HttpReply& r) {
        json out = json::array();
        for (const std::string& p : sse_payloads(r.body))
          if (p != "[DONE]") out.push_back(json::parse(p)["choices"]);
        return out;
      };
      EXPECT_EQ(choices(pd[i]), choices(want)) << "request " << i;
    } else {
      EXPECT_EQ(pd[i].json()["choices"], want.json()["choices"]) << "request " << i;
    }
  }
  EXPECT_EQ(replica_metric(decode.port(), "strata_pd_transfers_total", "result=\"ok\""), n);
  EXPECT_EQ(replica_metric(prefill.port(), "strata_pd_exported_states_total"), n);

  // The same host, --transfer shared: the floats cross between the two processes through POSIX shared memory, the
  // skeleton over the socket; the answers are the same.
  Replica shared(0, {"--role", "decode", "--prefill-peer", prefill.url(), "--transfer", "shared"});
  ASSERT_NE(shared.port(), 0) << shared.child.output;
  for (size_t i = 0; i < bodies.size(); i += 2) {
    const HttpReply got = post(shared.port(), bodies[i], 120 * patience());
    ASSERT_EQ(got.status, 200) << got.body;
    EXPECT_EQ(got.json()["choices"], post(colocated.port(), bodies[i], 120 * patience()).json()["choices"]) << i;
  }
  EXPECT_EQ(replica_metric(shared.port(), "strata_pd_transfers_total", "result=\"ok\""), (n + 1) / 2);
  EXPECT_EQ(replica_metric(shared.port(), "strata_pd_import_failures_total"), 0);
  EXPECT_LT(replica_metric(shared.port(), "strata_pd_transfer_bytes_total") * 10,
            replica_metric(decode.port(), "strata_pd_transfer_bytes_total"));
}

TEST(PdProcesses, APrefillReplicaKilledMidTransferLeavesEveryRequestToComplete) {
  if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  Replica prefill(0, {"--role", "prefill"});
  ASSERT_NE(prefill.port(), 0) << prefill.child.output;
  Replica decode(0, {"--role", "decode"});
  ASSERT_NE(decode.port(), 0) << decode.child.output;
  RouterProcess router({"--prefill", prefill.url(), "--decode", decode.url(), "--health-interval", "0.2"});
  ASSERT_NE(router.port(), 0) << router.child.output;
  ASSERT_TRUE(eventually([&] { return http_get(router.port(), "/health").status == 200; }, 30 * patience()));

  // The prefill replica stops (wedged): the orders reach it and wait; then it dies with them open.
  ::kill(prefill.child.pid, SIGSTOP);
  const int n = kSanitized ? 2 : 4;
  std::vector<HttpReply> replies(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] { replies[static_cast<size_t>(i)] = post(router.port(), body_of(prompt_ids(300, 40 + i), 4, true), 120 * patience()); });
  // Each order is on its way once the decode replica counts the request in flight.
  eventually([&] {
    const HttpReply load = http_get(decode.port(), "/strata/v1/load");
    return load.status == 200 && load.json()["requests_in_flight"].get<int64_t>() >= n;
  }, 30 * patience());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ::kill(prefill.child.pid, SIGKILL);
  for (std::thread& t : threads) t.join();
  for (const HttpReply& r : replies) EXPECT_TRUE(streamed_to_the_end(r)) << r.status << " " << r.body;
  // The transfers failed in the middle (the connection reset) and the prompts were computed on the decode replica.
  const auto count = [&](const char* result) {
    return std::max(0.0, replica_metric(decode.port(), "strata_pd_transfers_total", std::string("result=\"") + result + "\""));
  };
  EXPECT_EQ(count("protocol") + count("connect"), n);
  EXPECT_EQ(replica_metric(decode.port(), "strata_pd_imported_states_total"), 0);

  // With the prefill replica gone, new requests still complete.
  EXPECT_TRUE(streamed_to_the_end(post(router.port(), body_of(prompt_ids(50, 60), 3, true), 120 * patience())));
}

TEST(PdProcesses, ADecodeReplicaKilledMidStreamEndsItsStreamsClearly) {
  if (!have_tokenizer()) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  Replica prefill(0, {"--role", "prefill"});
  ASSERT_NE(prefill.port(), 0) << prefill.child.output;
  Replica d1(0, {"--role", "decode"}), d2(0, {"--role", "decode"});
  ASSERT_NE(d1.port(), 0) << d1.child.output;
  ASSERT_NE(d2.port(), 0) << d2.child.output;
  RouterProcess router({"--prefill", prefill.url(), "--decode", d1.url(), "--decode", d2.url(), "--policy",
                        "round_robin", "--health-interval", "0.2"});
  ASSERT_NE(router.port(), 0) << router.child.output;
  ASSERT_TRUE(eventually([&] { return http_get(router.port(), "/health").status == 200; }, 30 * patience()));

  const int n = kSanitized ? 4 : 6;
  std::vector<HttpReply> replies(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::atomic<int> first_bytes{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        HttpTestClient c(router.port());
        c.send(http_request("POST", "/v1/completions", body_of(prompt_ids(40, 80 + i), 400, true).dump()));
        if (c.wait_for("data: ", 60 * patience())) ++first_bytes;
        replies[static_cast<size_t>(i)] = c.read_reply(120 * patience());
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(i)] = e.what();
      }
    });
  eventually([&] { return first_bytes.load() == n; }, 60 * patience());
  ::kill(d1.child.pid, SIGKILL);
  for (std::thread& t : threads) t.join();
  int completed = 0, failed_clearly = 0;
  for (int i = 0; i < n; ++i) {
    const HttpReply& r = replies[static_cast<size_t>(i)];
    EXPECT_TRUE(errors[static_cast<size_t>(i)].empty()) << "request " << i << " hung or broke: " << errors[static_cast<size_t>(i)];
    if (streamed_to_the_end(r)) ++completed;
    else if (r.status == 200 && r.body.find("data: {\"error\"") != std::string::npos) ++failed_clearly;
    else ADD_FAILURE() << "request " << i << ": " << r.status << " " << r.body.substr(0, 300);
  }
  EXPECT_GT(failed_clearly, 0);  // round robin put some on the killed replica
  EXPECT_EQ(completed + failed_clearly, n);
  // New requests go to the surviving decode replica.
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(streamed_to_the_end(post(router.port(), body_of(prompt_ids(30, 90 + i), 3, true), 120 * patience())));
}

}  // namespace
}  // namespace strata::test
