#pragma once
// Prefill/decode disaggregation, the decode side's connector: a sequence admitted with a state another engine is
// computing (StateHandoff::incoming, a stream of Model::snapshot bytes) takes its slot and its prompt's token blocks
// at once, then restores each layer as its bytes arrive (Model::begin_restore; from a shared region's floats when the
// bytes are a same-host transfer's skeleton), and starts computing — the last prompt token — when the last layer is
// in. Bytes that cannot be used (damaged, another model, as long as the whole
// prompt) and streams that fail are counted and logged, and the prompt is computed here in the same slot; a pool
// without room for the state now defers the admission (state_connector.h kWaitForRoom).
#include <map>
#include <memory>

#include "engine/state_connector.h"
#include "model/model.h"
#include "model/state_pool.h"

namespace strata::engine {

class ImportedStateConnector : public StateConnector {
 public:
  ImportedStateConnector(const model::Model& model, model::StatePool& pool) : model_(model), pool_(pool) {}
  int64_t load(Sequence& s, model::SequenceState& into) override;
  void poll() override;
  void on_finish(Sequence& s, const model::SequenceState& state) override;
  std::optional<int64_t> reported_cached_tokens(Sequence& s) override;

  int64_t imported() const { return imported_; }
  int64_t failures() const { return failures_; }
  int64_t awaiting() const { return static_cast<int64_t>(restores_.size()); }
  double restore_seconds() const { return restore_seconds_; }  // spent in load() and poll(): feeding, copying

 private:
  struct Restore {
    Sequence* sequence;
    model::SequenceState* state;                   // its slot's
    std::unique_ptr<model::StateRestore> restore;  // into `state`, begun with the first bytes
    std::unique_ptr<model::SharedRegion> region;   // a same-host transfer's floats, opened with the first bytes
    size_t next_chunk = 0;                         // of its stream
  };
  // Feeds what has arrived; true when the restore is over (done or given up).
  bool advance(Restore& r);
  void give_up(Restore& r, const std::string& why);
  // The restore is over: the shared region is closed and its maker told it may free it.
  void end(Restore& r);

  const model::Model& model_;
  model::StatePool& pool_;
  std::map<uint64_t, Restore> restores_;  // by sequence id: the sequences awaiting their state
  int64_t imported_ = 0, failures_ = 0;
  double restore_seconds_ = 0;
};

}  // namespace strata::engine
