#pragma once
// Per-position token masks, the cache that makes masks cheap (XGrammar's adaptive token mask cache, in Earley
// terms). For a "kernel" item — one whose dot is past the start of its alternative, so it is not a mere prediction —
// the tokens fall into three classes that do not depend on the rest of the parse stack:
//   accepted:  the token's bytes can all be consumed starting from this item (inside its rule and the rules it
//              calls, and inside its statically known parents — see EarleyParser::start_isolated);
//   rejected:  no way through, and the rule never ends early with a byte that could follow it;
//   uncertain: the rule (or its known parents) can end mid-token with a next byte in the rule's FOLLOW set, so what
//              happens depends on the real stack: decided at runtime by walking these tokens through the parser.
// A token that is rejected from every kernel item of the current Earley set is rejected: every way to continue a
// parse starts at a kernel item (predictions are derived from them). Ending with zero bytes consumed is not an
// exit: the rule's completion is then already in the set, and the parents it advanced are kernel items themselves.
#include <cstdint>
#include <vector>

#include "text/grammar/byte_grammar.h"
#include "text/grammar/token_vocabulary.h"

namespace strata::text::grammar {

struct PositionMask {
  std::vector<uint32_t> accepted;  // mask words, bit set = accepted from this item whatever the stack
  std::vector<int32_t> uncertain;  // ids to check at runtime, in byte order (TokenVocabulary::sorted_ids order)
  uint32_t accepted_count = 0;
};

// How many statically known parent rules the isolated parse climbs.
inline constexpr int kMaskParentLevels = 4;

PositionMask compute_position_mask(const ByteGrammar& grammar, const TokenVocabulary& vocab, uint32_t pos);

}  // namespace strata::text::grammar
