#pragma once
// Which replica the router sent which prompt blocks: a bounded, approximate map from block hash (the prefix
// cache's own chained hashes, model/token_blocks.h) to the replicas that computed that prefix. Approximate because
// a replica may have evicted a block since, and because the router only knows what it sent itself; it is a guess
// at where a prefix's cache lives, cheap to keep and to consult, that the replica's own cache then confirms.
//
// Bounded: the least recently sent block is forgotten first once `capacity` blocks are known. Replicas are bits of
// a 64-bit mask, so at most kMaxReplicas request targets.
#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "model/token_blocks.h"

namespace strata::router {

class PrefixIndex {
 public:
  static constexpr size_t kMaxReplicas = 64;

  explicit PrefixIndex(size_t capacity);

  // For each of `replicas` replicas, how many leading blocks of `hashes` it holds (a chain: block i counts only when
  // blocks 0..i-1 do).
  std::vector<int64_t> matched_blocks(const std::vector<model::BlockHash>& hashes, size_t replicas) const;
  // `replica` now holds every block of `hashes` (they become the most recently used).
  void insert(const std::vector<model::BlockHash>& hashes, size_t replica);
  // `replica` holds nothing any more (it restarted, or was ejected and may come back empty).
  void forget_replica(size_t replica);

  size_t size() const { return entries_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    uint64_t replicas = 0;
    std::list<model::BlockHash>::iterator recency;
  };
  size_t capacity_;
  std::unordered_map<model::BlockHash, Entry, model::BlockHashKey> entries_;
  std::list<model::BlockHash> recency_;  // most recently sent first
};

}  // namespace strata::router
