#pragma once
// The engine on its own thread, for servers: requests are submitted from any thread, each request's token events
// come back through its callback (called on the engine thread; it must hand off quickly, e.g. post to an I/O
// loop). The loop steps whenever work exists and sleeps otherwise.
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

namespace strata::engine {

class AsyncEngine {
 public:
  using Callback = std::function<void(const TokenEvent&)>;

  // `after_events` (optional) runs on the engine thread after each step whose events went to their callbacks: a
  // server can collect a step's events in its callbacks and hand them to its I/O loop in one go.
  AsyncEngine(const model::Model& model, EngineConfig config, std::function<void()> after_events = {});
  ~AsyncEngine();  // shutdown(false)
  AsyncEngine(const AsyncEngine&) = delete;
  AsyncEngine& operator=(const AsyncEngine&) = delete;

  // Validates now (throws strata::Error naming the problem, or if the id is in flight or the engine is shutting
  // down), then queues. Every sequence of the request ends with a finished event.
  void submit(const std::string& request_id, std::vector<int32_t> prompt, const SamplingParams& params,
              Callback on_event, const CacheOptions& cache = {}, const StateHandoff& handoff = {});
  // Aborts a request wherever it is (no-op if unknown or done). Its sequences end with reason "abort".
  void abort(const std::string& request_id);

  EngineStats stats() const;  // as of the last step
  size_t in_flight() const;

  // Stops accepting requests. drain: let in-flight requests finish; otherwise abort them. Returns once the loop
  // has ended; every callback has then seen its finished events.
  void shutdown(bool drain);

 private:
  struct Submission {
    std::string id;
    std::vector<int32_t> prompt;
    SamplingParams params;
    CacheOptions cache;
    StateHandoff handoff;
  };
  void loop();
  void state_arrived();

  // Arriving states (StateHandoff::incoming) wake the loop through this, from their producers' threads; the
  // destructor detaches it first, so a transfer that outlives the engine wakes nothing.
  struct Waker {
    std::mutex mu;
    AsyncEngine* engine = nullptr;
  };
  std::shared_ptr<Waker> waker_ = std::make_shared<Waker>();
  bool state_arrived_ = false;  // under mu_

  Engine engine_;  // touched by the loop thread only (validate_request excepted: it is const and stateless)
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Submission> submissions_;
  std::vector<std::string> aborts_;
  struct Pending {
    Callback callback;
    int64_t unfinished;  // sequences (n) without a finished event yet
    int64_t kept = -1;   // loop(): where its callback went for the step that finished it
  };
  std::map<std::string, Pending> requests_;  // inserted by submit(), erased by the loop thread only
  std::function<void()> after_events_;
  EngineStats stats_;
  bool accepting_ = true, stopping_ = false, drain_ = false;
  std::thread thread_;
};

}  // namespace strata::engine
