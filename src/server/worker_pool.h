#pragma once
// A few threads that run jobs in order of arrival: the server's request preparation (parse, tokenize, grammar
// compile) and prefill transfers, the router's preparation of large requests.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strata::server {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool() { stop(); }
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void post(std::function<void()> job);  // dropped once stop() has begun
  // Joins the threads. finish_queued: jobs already posted run first; otherwise they are dropped.
  void stop(bool finish_queued = true);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false, finish_queued_ = true;
  std::vector<std::thread> threads_;
};

}  // namespace strata::server
