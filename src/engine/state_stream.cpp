#include "engine/state_stream.h"

#include "core/error.h"

namespace strata::engine {

void StateStream::set_cached_tokens(int64_t tokens) {
  std::lock_guard lock(mu_);
  cached_tokens_ = tokens;
}

void StateStream::append(std::string bytes) {
  if (bytes.empty()) return;
  {
    std::lock_guard lock(mu_);
    if (finished_ || failed_) strata::fail("state stream: bytes appended after its end");
    bytes_ += static_cast<int64_t>(bytes.size());
    chunks_.push_back(std::make_shared<const std::string>(std::move(bytes)));
  }
  changed();
}

void StateStream::finish() {
  {
    std::lock_guard lock(mu_);
    if (failed_) return;
    finished_ = true;
  }
  changed();
}

void StateStream::fail(std::string why) {
  {
    std::lock_guard lock(mu_);
    if (finished_ || failed_) return;  // the first end counts
    failed_ = std::move(why);
  }
  changed();
}

StateStream::Read StateStream::read_from(size_t from) const {
  std::lock_guard lock(mu_);
  Read r;
  if (from < chunks_.size()) r.chunks.assign(chunks_.begin() + static_cast<std::ptrdiff_t>(from), chunks_.end());
  r.finished = finished_;
  r.failed = failed_;
  return r;
}

int64_t StateStream::cached_tokens() const {
  std::lock_guard lock(mu_);
  return cached_tokens_;
}

int64_t StateStream::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

bool StateStream::ended() const {
  std::lock_guard lock(mu_);
  return finished_ || failed_.has_value();
}

void StateStream::set_shared_floats(std::string handle, std::shared_ptr<model::SharedRegion> keep) {
  std::lock_guard lock(mu_);
  if (!chunks_.empty()) strata::fail("state stream: the shared region is named after the first bytes");
  shared_handle_ = std::move(handle);
  shared_keep_ = std::move(keep);
}

std::string StateStream::shared_floats() const {
  std::lock_guard lock(mu_);
  return shared_handle_;
}

std::shared_ptr<model::SharedRegion> StateStream::take_shared_region() {
  std::lock_guard lock(mu_);
  return std::move(shared_keep_);
}

void StateStream::release_shared() {
  std::function<void()> run;
  {
    std::lock_guard lock(mu_);
    if (shared_released_) return;
    shared_released_ = true;
    run = std::move(on_release_);
  }
  if (run) run();
}

bool StateStream::shared_released() const {
  std::lock_guard lock(mu_);
  return shared_released_;
}

void StateStream::on_shared_released(std::function<void()> on_release) {
  std::lock_guard lock(mu_);
  on_release_ = std::move(on_release);
}

void StateStream::on_change(std::function<void()> notify) {
  bool now = false;
  {
    std::lock_guard lock(mu_);
    notify_ = notify ? std::make_shared<const std::function<void()>>(std::move(notify)) : nullptr;
    now = notify_ && (!chunks_.empty() || finished_ || failed_);
  }
  if (now) changed();
}

void StateStream::changed() {
  std::shared_ptr<const std::function<void()>> notify;
  {
    std::lock_guard lock(mu_);
    notify = notify_;
  }
  // Outside the lock: the reader's wake-up may take locks of its own.
  if (notify) (*notify)();
}

}  // namespace strata::engine
