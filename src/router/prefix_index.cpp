#include "router/prefix_index.h"

#include "core/error.h"

namespace strata::router {

PrefixIndex::PrefixIndex(size_t capacity) : capacity_(capacity) {
  if (capacity_ < 1) fail("prefix index: the capacity must be at least one block");
}

std::vector<int64_t> PrefixIndex::matched_blocks(const std::vector<model::BlockHash>& hashes, size_t replicas) const {
  std::vector<int64_t> matched(replicas, 0);
  uint64_t still = replicas >= 64 ? ~uint64_t{0} : (uint64_t{1} << replicas) - 1;  // replicas matching so far
  for (size_t i = 0; i < hashes.size() && still != 0; ++i) {
    const auto it = entries_.find(hashes[i]);
    const uint64_t holders = it == entries_.end() ? 0 : it->second.replicas & still;
    for (size_t r = 0; r < replicas; ++r)
      if (holders >> r & 1) matched[r] = static_cast<int64_t>(i) + 1;
    still = holders;
  }
  return matched;
}

void PrefixIndex::insert(const std::vector<model::BlockHash>& hashes, size_t replica) {
  if (replica >= kMaxReplicas) fail("prefix index: replica ", replica, " is beyond the ", kMaxReplicas, " it can track");
  for (const model::BlockHash& h : hashes) {
    auto [it, added] = entries_.try_emplace(h);
    if (added) {
      recency_.push_front(h);
    } else {
      recency_.splice(recency_.begin(), recency_, it->second.recency);
    }
    it->second.recency = recency_.begin();
    it->second.replicas |= uint64_t{1} << replica;
  }
  while (entries_.size() > capacity_) {
    entries_.erase(recency_.back());
    recency_.pop_back();
  }
}

void PrefixIndex::forget_replica(size_t replica) {
  const uint64_t bit = uint64_t{1} << replica;
  for (auto it = entries_.begin(); it != entries_.end();) {
    it->second.replicas &= ~bit;
    if (it->second.replicas == 0) {
      recency_.erase(it->second.recency);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace strata::router
