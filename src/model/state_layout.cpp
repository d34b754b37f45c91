#include "model/state_layout.h"

namespace strata::model {

int64_t StateLayout::blocks_for_tokens(int64_t tokens) const {
  if (smallest_rate == 0 || tokens < smallest_rate) return 0;
  // The last closed window of the most frequent compressor ends at the last multiple of its rate.
  const int64_t last_closed = tokens / smallest_rate * smallest_rate - 1;
  return last_closed / block_tokens + 1;
}

}  // namespace strata::model
