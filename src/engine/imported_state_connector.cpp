#include "engine/imported_state_connector.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"

namespace strata::engine {

int64_t ImportedStateConnector::load(Sequence& s, model::SequenceState& into) {
  if (!s.handoff.incoming) return 0;
  // Restored from a shared region before and preempted since: the region may be gone; computed here.
  if (!s.handoff.incoming->shared_floats().empty() && s.handoff.incoming->shared_released()) {
    s.handoff.incoming.reset();
    return 0;
  }
  const auto prompt = static_cast<int64_t>(s.prompt.size());
  // The slot's blocks for the whole prompt, taken now (pre-allocated): the bytes on their way then always have a
  // place, and the last prompt token's step needs no more. No room now: not a reason to give the state up; the
  // sequence waits in the queue like any other that lacks blocks.
  if (!pool_.reserve(into, prompt)) {
    into.reset();
    return kWaitForRoom;
  }
  Restore r{&s, &into, nullptr, nullptr, 0};
  s.awaiting_state = true;
  if (advance(r)) return s.num_computed;  // it had all arrived already
  restores_.emplace(s.id, std::move(r));
  return 0;
}

void ImportedStateConnector::poll() {
  for (auto it = restores_.begin(); it != restores_.end();) it = advance(it->second) ? restores_.erase(it) : std::next(it);
}

bool ImportedStateConnector::advance(Restore& r) {
  const auto start = std::chrono::steady_clock::now();
  struct Timed {  // whichever way this returns
    std::chrono::steady_clock::time_point start;
    double& total;
    ~Timed() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  } timed{start, restore_seconds_};
  Sequence& s = *r.sequence;
  const StateStream::Read read = s.handoff.incoming->read_from(r.next_chunk);
  try {
    if (!r.restore && !read.chunks.empty()) {
      // The transport names a shared region before the first byte.
      if (const std::string handle = s.handoff.incoming->shared_floats(); !handle.empty())
        r.region = model_.open_shared_region(handle);
      r.restore = model_.begin_restore(*r.state, r.region.get());
    }
    for (const auto& chunk : read.chunks) {
      r.restore->feed(*chunk);
      ++r.next_chunk;
    }
    // The last prompt token is computed here: its logits pick the first token.
    if (const int64_t n = r.restore ? r.restore->num_tokens() : -1; n == 0 || n >= static_cast<int64_t>(s.prompt.size()))
      fail("an imported state of ", n, " tokens for a prompt of ", s.prompt.size());
  } catch (const std::exception& e) {
    give_up(r, e.what());
    return true;
  }
  if (r.restore && r.restore->complete()) {
    s.num_computed = r.restore->num_tokens();
    s.awaiting_state = false;
    s.imported = true;
    ++imported_;
    r.restore.reset();  // complete: the slot keeps the state
    end(r);
    return true;
  }
  if (read.failed) {
    give_up(r, "the transfer failed: " + *read.failed);
    return true;
  }
  if (read.finished) {
    give_up(r, "the stream ended before the state was complete (" +
                   std::to_string(r.restore ? r.restore->layers_restored() : 0) + " layers restored)");
    return true;
  }
  return false;
}

void ImportedStateConnector::give_up(Restore& r, const std::string& why) {
  Sequence& s = *r.sequence;
  r.restore.reset();  // an incomplete restore resets the slot's state (its blocks go back to the pool)
  r.state->reset();
  end(r);
  s.awaiting_state = false;
  s.num_computed = 0;
  s.handoff.incoming.reset();  // computed here from now on
  ++failures_;
  std::fprintf(stderr, "strata: request %s: the imported state cannot be used (%s); computing its prompt here\n",
               s.request_id.c_str(), why.c_str());
}

void ImportedStateConnector::end(Restore& r) {
  if (r.region) {
    model_.synchronize();  // copies that read the region are done
    r.region.reset();
  }
  if (r.sequence->handoff.incoming) r.sequence->handoff.incoming->release_shared();
}

void ImportedStateConnector::on_finish(Sequence& s, const model::SequenceState&) {
  // Aborted while its state was arriving: the restore ends before the slot goes back.
  if (const auto it = restores_.find(s.id); it != restores_.end()) {
    it->second.restore.reset();
    end(it->second);
    restores_.erase(it);
  }
}

std::optional<int64_t> ImportedStateConnector::reported_cached_tokens(Sequence& s) {
  if (!s.imported) return std::nullopt;
  return s.handoff.incoming ? std::min(s.handoff.incoming->cached_tokens(), s.num_computed) : 0;
}

}  // namespace strata::engine
