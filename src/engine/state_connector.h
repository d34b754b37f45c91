#pragma once
// Where a sequence's state comes from other than the forward pass, and where it goes after: the engine's one seam
// for moving state in and out, in the shape of vLLM's KV connector. Two connectors plug in today:
// - the prefix cache (prefix_cache_connector.h): content-addressed token blocks in the state pool, host memory and
//   a directory, restored at admission and saved at checkpoints;
// - a state shipped by a prefill replica (imported_state_connector.h: prefill/decode disaggregation).
// The engine asks them in order (the imported state first): the first that places tokens wins.
//
// Scheduler half (the engine thread, while planning a step):
//   load()       a sequence with nothing computed got a slot: put what this connector holds for it there;
//   chunk_end()  where a prefill span must stop, so that the connector can save the state at that point.
// Worker half (the engine thread, after the step ran, with the slot's state as the step left it):
//   after_step() the sequence's state advanced: publish or save what this connector keeps;
//   on_finish()  the sequence is done, its state still in its slot.
// And on a sequence's first token (or its state export), reported_cached_tokens(): the prompt tokens the usage
// reports as cached, when this connector placed the state.
//
// A transport that moves state asynchronously (a disk tier read ahead, RDMA into reserved pages) keeps this shape:
// load() then says how many tokens will be in place and the worker half waits for them per layer.
#include <cstdint>
#include <optional>

#include "engine/sequence.h"
#include "model/sequence_state.h"

namespace strata::engine {

class StateConnector {
 public:
  virtual ~StateConnector() = default;
  // Tokens placed into `into` (0: none, `into` left reset). At least one token must be left to compute.
  virtual int64_t load(Sequence& s, model::SequenceState& into) = 0;
  virtual int64_t chunk_end(const Sequence& /*s*/, int64_t /*start*/) const { return INT64_MAX; }
  virtual void after_step(Sequence& /*s*/, model::SequenceState& /*state*/) {}
  virtual void on_finish(Sequence& /*s*/, const model::SequenceState& /*state*/) {}
  // nullopt: this connector did not place the sequence's state (ask the next one).
  virtual std::optional<int64_t> reported_cached_tokens(Sequence& /*s*/) { return std::nullopt; }
};

}  // namespace strata::engine
