#include "engine/async_engine.h"

#include <cstdio>

#include "core/error.h"

namespace strata::engine {

AsyncEngine::AsyncEngine(const model::Model& model, EngineConfig config, std::function<void()> after_events)
    : engine_(model, config), after_events_(std::move(after_events)), thread_([this] { loop(); }) {
  waker_->engine = this;
}

AsyncEngine::~AsyncEngine() {
  {
    std::lock_guard lock(waker_->mu);
    waker_->engine = nullptr;
  }
  shutdown(false);
}

void AsyncEngine::state_arrived() {
  std::lock_guard lock(mu_);
  state_arrived_ = true;
  wake_.notify_one();
}

void AsyncEngine::submit(const std::string& request_id, std::vector<int32_t> prompt, const SamplingParams& params,
                         Callback on_event, const CacheOptions& cache, const StateHandoff& handoff) {
  engine_.validate_request(prompt, params);
  {
    std::lock_guard lock(mu_);
    if (!accepting_) fail("the server is shutting down");
    if (requests_.count(request_id)) fail("request id '", request_id, "' is already in flight");
    requests_.emplace(request_id, Pending{std::move(on_event), params.n});
    submissions_.push_back({request_id, std::move(prompt), params, cache, handoff});
    wake_.notify_one();
  }
  // Outside mu_: a stream with bytes already calls this at once, and it takes mu_.
  if (handoff.incoming)
    handoff.incoming->on_change([waker = waker_] {
      std::lock_guard lock(waker->mu);
      if (waker->engine) waker->engine->state_arrived();
    });
}

void AsyncEngine::abort(const std::string& request_id) {
  std::lock_guard lock(mu_);
  aborts_.push_back(request_id);
  wake_.notify_one();
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

size_t AsyncEngine::in_flight() const {
  std::lock_guard lock(mu_);
  return requests_.size();
}

void AsyncEngine::shutdown(bool drain) {
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    if (!stopping_) drain_ = drain;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void AsyncEngine::loop() {
  for (;;) {
    std::deque<Submission> subs;
    std::vector<std::string> aborts;
    bool stop = false, drain = false;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] {
        return stopping_ || !submissions_.empty() || !aborts_.empty() || state_arrived_ || engine_.has_work();
      });
      state_arrived_ = false;
      subs.swap(submissions_);
      aborts.swap(aborts_);
      stop = stopping_;
      drain = drain_;
    }
    for (Submission& s : subs) engine_.add_request(s.id, std::move(s.prompt), s.params, s.cache, s.handoff);  // validated in submit()
    for (const std::string& id : aborts) engine_.abort(id);
    if (stop && !drain) {
      std::vector<std::string> all;
      {
        std::lock_guard lock(mu_);
        for (const auto& [id, p] : requests_) all.push_back(id);
      }
      for (const std::string& id : all) engine_.abort(id);
    }
    std::vector<TokenEvent> events;
    try {
      events = engine_.step();
    } catch (const std::exception& e) {
      // A failed step (a device error, memory) leaves the state of its sequences undefined: abort every request
      // (each gets its finish event from the next step) and keep serving the ones that come after.
      std::vector<std::string> all;
      {
        std::lock_guard lock(mu_);
        for (const auto& [id, p] : requests_) all.push_back(id);
      }
      std::fprintf(stderr, "strata: engine step failed (%s); aborting %zu request(s)\n", e.what(), all.size());
      for (const std::string& id : all) engine_.abort(id);
      continue;
    }
    // One pass under the lock, the callbacks after it. A request whose last sequence finished leaves requests_
    // now (as in_flight() promises) and its callback moves to `kept` for this step's calls; the others are called
    // where they are: only this thread erases from requests_, and a std::map insert (submit) moves no element.
    struct Delivery {
      std::map<std::string, Pending>::iterator request;
      const TokenEvent* event;
      const Callback* callback = nullptr;
    };
    std::vector<Delivery> deliveries;
    std::vector<Callback> kept;
    std::vector<std::map<std::string, Pending>::iterator> finished;
    deliveries.reserve(events.size());
    kept.reserve(events.size());
    {
      std::lock_guard lock(mu_);
      for (const TokenEvent& ev : events) {
        const auto it = requests_.find(ev.request_id);
        if (it == requests_.end()) continue;
        deliveries.push_back({it, &ev});
        if (ev.finished) --it->second.unfinished;
      }
      for (Delivery& d : deliveries) {
        Pending& p = d.request->second;
        if (p.unfinished > 0) {
          d.callback = &p.callback;
          continue;
        }
        if (p.kept < 0) {
          p.kept = static_cast<int64_t>(kept.size());
          kept.push_back(std::move(p.callback));
          finished.push_back(d.request);
        }
        d.callback = &kept[static_cast<size_t>(p.kept)];
      }
      for (const auto& it : finished) requests_.erase(it);
    }
    for (const Delivery& d : deliveries) (*d.callback)(*d.event);
    if (after_events_ && !deliveries.empty()) after_events_();
    {
      std::lock_guard lock(mu_);
      stats_ = engine_.stats();
      if (stop && !engine_.has_unfinished() && submissions_.empty()) return;
    }
  }
}

}  // namespace strata::engine
