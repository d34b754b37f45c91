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
// A connector whose state arrives asynchronously (a prefill replica's stream; later a disk tier read ahead, RDMA
// into reserved pages) reserves the slot's token blocks in load(), marks the sequence awaiting_state (it holds them
// but is not scheduled) and returns 0; its poll(), at the start of every step, restores what has arrived, layer by
// layer, and when all is in sets the sequence's num_computed and clears awaiting_state (or clears it with nothing
// restored, and the tokens are computed). load() returns kWaitForRoom when the pool cannot hold the state now: the
// sequence then waits in the queue, in order, instead of starting to compute what is on its way.
#include <cstdint>
#include <optional>

#include "engine/sequence.h"
#include "model/sequence_state.h"

namespace strata::engine {

inline constexpr int64_t kWaitForRoom = -1;

class StateConnector {
 public:
  virtual ~StateConnector() = default;
  // Tokens placed into `into` (0: none, `into` left reset, or the sequence is awaiting_state; kWaitForRoom). At
  // least one token must be left to compute.
  virtual int64_t load(Sequence& s, model::SequenceState& into) = 0;
  // Asynchronous connectors: progress on the sequences awaiting state (see above).
  virtual void poll() {}
  virtual int64_t chunk_end(const Sequence& /*s*/, int64_t /*start*/) const { return INT64_MAX; }
  virtual void after_step(Sequence& /*s*/, model::SequenceState& /*state*/) {}
  virtual void on_finish(Sequence& /*s*/, const model::SequenceState& /*state*/) {}
  // nullopt: this connector did not place the sequence's state (ask the next one).
  virtual std::optional<int64_t> reported_cached_tokens(Sequence& /*s*/) { return std::nullopt; }
};

}  // namespace strata::engine
