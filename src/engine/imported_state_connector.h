#pragma once
// Prefill/decode disaggregation, the decode side's connector: a sequence admitted with a state computed by another
// engine (StateHandoff::imported, Model::snapshot bytes) starts from it instead of computing those tokens. Bytes that
// cannot be used (damaged, another model, as long as the whole prompt) are dropped, counted and logged, and the
// prompt is computed here; a pool without room for them now only defers the import to the next admission.
#include "engine/state_connector.h"
#include "model/model.h"
#include "model/state_pool.h"

namespace strata::engine {

class ImportedStateConnector : public StateConnector {
 public:
  ImportedStateConnector(const model::Model& model, const model::StatePool& pool) : model_(model), pool_(pool) {}
  int64_t load(Sequence& s, model::SequenceState& into) override;
  std::optional<int64_t> reported_cached_tokens(Sequence& s) override;

  int64_t imported() const { return imported_; }
  int64_t failures() const { return failures_; }

 private:
  const model::Model& model_;
  const model::StatePool& pool_;
  int64_t imported_ = 0, failures_ = 0;
};

}  // namespace strata::engine
