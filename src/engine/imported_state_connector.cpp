#include "engine/imported_state_connector.h"

#include <cstdio>

#include "core/error.h"

namespace strata::engine {

int64_t ImportedStateConnector::load(Sequence& s, model::SequenceState& into) {
  if (!s.handoff.imported) return 0;
  // No room for it now: not a reason to give it up. The sequence waits like any other that lacks blocks (or starts
  // computing, if a first chunk fits), and tries again at its next admission.
  if (pool_.free_blocks() < pool_.blocks_for_tokens(static_cast<int64_t>(s.prompt.size()))) return 0;
  try {
    model_.restore(*s.handoff.imported, into);
    // The last prompt token is computed here: its logits pick the first token.
    if (into.num_tokens < 1 || into.num_tokens >= static_cast<int64_t>(s.prompt.size()))
      fail("an imported state of ", into.num_tokens, " tokens for a prompt of ", s.prompt.size());
  } catch (const std::exception& e) {
    into.reset();
    s.handoff.imported.reset();  // computed here from now on
    ++failures_;
    std::fprintf(stderr, "strata: request %s: the imported state cannot be used (%s); computing its prompt here\n",
                 s.request_id.c_str(), e.what());
    return 0;
  }
  ++imported_;
  s.imported = true;
  return into.num_tokens;
}

std::optional<int64_t> ImportedStateConnector::reported_cached_tokens(Sequence& s) {
  if (!s.imported) return std::nullopt;
  return s.handoff.imported_cached_tokens;
}

}  // namespace strata::engine
