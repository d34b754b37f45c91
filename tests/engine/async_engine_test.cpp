// The engine thread: submissions from several threads, callbacks with every token, aborts, shutdown.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "tiny_model.h"

namespace strata::engine {
namespace {

struct Collector {
  std::mutex mu;
  std::condition_variable done_cv;
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, FinishReason> finished;

  AsyncEngine::Callback callback() {
    return [this](const TokenEvent& ev) {
      std::lock_guard lock(mu);
      if (ev.token) tokens[ev.request_id].push_back(*ev.token);
      if (ev.finished) finished[ev.request_id] = ev.reason;
      done_cv.notify_all();
    };
  }
  void wait_for(size_t n) {
    std::unique_lock lock(mu);
    done_cv.wait(lock, [&] { return finished.size() >= n; });
  }
};

class AsyncEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = test::tiny_model("async_engine", 4).release(); }
  static void TearDownTestSuite() { delete model_; }
  static EngineConfig config() {
    EngineConfig c;
    c.scheduler.max_num_batched_tokens = 64;
    c.pool.max_sequences = 8;
    c.pool.blocks = 64;
    return c;
  }
  static model::v4::Model* model_;
};
model::v4::Model* AsyncEngineTest::model_ = nullptr;

TEST_F(AsyncEngineTest, ConcurrentSubmittersGetTheirOwnTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 6;
  p.ignore_eos = true;
  // Reference: the synchronous engine, one request at a time.
  std::map<std::string, std::vector<int32_t>> expected;
  for (int q = 0; q < 6; ++q) {
    Engine e(*model_, config());
    e.add_request("r", {static_cast<int32_t>(10 + q), 20, 30}, p);
    while (e.has_unfinished())
      for (const TokenEvent& ev : e.step())
        if (ev.token) expected["q" + std::to_string(q)].push_back(*ev.token);
  }
  AsyncEngine engine(*model_, config());
  Collector c;
  std::vector<std::thread> threads;
  for (int q = 0; q < 6; ++q)
    threads.emplace_back([&, q] { engine.submit("q" + std::to_string(q), {static_cast<int32_t>(10 + q), 20, 30}, p, c.callback()); });
  for (auto& t : threads) t.join();
  c.wait_for(6);
  EXPECT_EQ(c.tokens, expected);
  for (const auto& [id, why] : c.finished) EXPECT_EQ(why, FinishReason::Length) << id;
  EXPECT_EQ(engine.in_flight(), 0u);
}

TEST_F(AsyncEngineTest, AbortAndShutdownFinishEveryRequest) {
  SamplingParams p;
  p.max_tokens = 400;
  p.ignore_eos = true;
  AsyncEngine engine(*model_, config());
  Collector c;
  engine.submit("a", {5, 6, 7}, p, c.callback());
  engine.submit("b", {8, 9}, p, c.callback());
  EXPECT_THROW(engine.submit("a", {1}, p, c.callback()), Error);  // in flight
  SamplingParams bad = p;
  bad.temperature = -1;
  EXPECT_THROW(engine.submit("c", {1}, bad, c.callback()), Error);
  engine.abort("a");
  c.wait_for(1);
  engine.shutdown(/*drain=*/false);
  EXPECT_EQ(c.finished.at("a"), FinishReason::Abort);
  EXPECT_EQ(c.finished.at("b"), FinishReason::Abort);
  EXPECT_EQ(engine.stats().used_slots, 0);
  EXPECT_EQ(engine.stats().used_blocks, 0);
  EXPECT_THROW(engine.submit("d", {1}, p, c.callback()), Error);
}

TEST_F(AsyncEngineTest, DrainingShutdownCompletesRequests) {
  SamplingParams p;
  p.max_tokens = 5;
  p.ignore_eos = true;
  Collector c;
  {
    AsyncEngine engine(*model_, config());
    engine.submit("x", {3, 4}, p, c.callback());
    engine.shutdown(/*drain=*/true);
  }
  EXPECT_EQ(c.finished.at("x"), FinishReason::Length);
  EXPECT_EQ(c.tokens.at("x").size(), 5u);
}

}  // namespace
}  // namespace strata::engine
