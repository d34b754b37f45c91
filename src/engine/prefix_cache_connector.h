#pragma once
// The prefix cache's connector (cache/prefix_cache.h): restore at admission; checkpoints in prefill (every N
// blocks, the prompt's last block boundary, and the end of a prefix seen before); full blocks published in the state
// pool under their hashes as they fill; the last block boundary of decode saved when a sequence finishes.
#include <memory>

#include "cache/prefix_cache.h"
#include "engine/state_connector.h"
#include "model/state_pool.h"

namespace strata::engine {

class PrefixCacheConnector : public StateConnector {
 public:
  PrefixCacheConnector(std::shared_ptr<cache::PrefixCache> cache, model::StatePool& pool)
      : cache_(std::move(cache)), pool_(pool) {}
  int64_t load(Sequence& s, model::SequenceState& into) override;
  int64_t chunk_end(const Sequence& s, int64_t start) const override;
  void after_step(Sequence& s, model::SequenceState& state) override;
  void on_finish(Sequence& s, const model::SequenceState& state) override;
  std::optional<int64_t> reported_cached_tokens(Sequence& s) override;

 private:
  std::shared_ptr<cache::PrefixCache> cache_;
  model::StatePool& pool_;
};

}  // namespace strata::engine
