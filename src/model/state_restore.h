#pragma once
// A state's snapshot restored as its bytes arrive (prefill/decode disaggregation: the decode replica restores a
// prefill replica's state layer by layer while later layers are still on the way). A snapshot is a header and one
// section per layer (Model::snapshot's format); each section is checked and put in place as soon as all its bytes
// are here, so when the last byte arrives only the last layer is left to restore.
#include <cstdint>
#include <string_view>

namespace strata::model {

class StateRestore {
 public:
  virtual ~StateRestore() = default;  // a restore that did not complete leaves its target reset
  // The snapshot's next bytes, split anywhere. Throws strata::Error naming the problem (damaged or foreign bytes,
  // bytes past the end, no room for the entries); the target is then reset and the restore is over.
  virtual void feed(std::string_view bytes) = 0;
  virtual bool complete() const = 0;
  // Positions the snapshot holds, once its header is in (-1 before).
  virtual int64_t num_tokens() const = 0;
  virtual int64_t layers_restored() const = 0;
};

}  // namespace strata::model
