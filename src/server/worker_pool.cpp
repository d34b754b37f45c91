#include "server/worker_pool.h"

#include <algorithm>

namespace strata::server {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { run(); });
}

void WorkerPool::post(std::function<void()> job) {
  std::lock_guard lock(mu_);
  if (stopping_) return;
  jobs_.push_back(std::move(job));
  cv_.notify_one();
}

void WorkerPool::stop(bool finish_queued) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) finish_queued_ = finish_queued;
    stopping_ = true;
    cv_.notify_all();
  }
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void WorkerPool::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty() || (stopping_ && !finish_queued_)) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace strata::server
