#include "text/grammar/token_mask.h"

#include <algorithm>

#include "text/grammar/earley.h"

namespace strata::text::grammar {

PositionMask compute_position_mask(const ByteGrammar& grammar, const TokenVocabulary& vocab, uint32_t pos) {
  PositionMask out;
  out.accepted.assign(vocab.mask_words(), 0);
  EarleyParser parser(grammar);
  parser.start_isolated(pos, kMaskParentLevels);

  const std::vector<int32_t>& sorted = vocab.sorted_ids();
  const std::vector<uint32_t>& lcp = vocab.sorted_lcp();
  // exit_before[k]: along the current path of k bytes, some rule ended against an unknown parent at an offset j in
  // (0, k) and byte j may follow it — a token that dies later is uncertain, not rejected.
  std::vector<uint8_t> exit_before{0};
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int32_t id = sorted[i];
    const std::string_view bytes = vocab.bytes(id);
    size_t consumed = parser.depth() - 1;
    // The path is a prefix of the last token walked; tokens jumped over between share more than the path with it.
    const size_t keep = i == 0 ? 0 : std::min<size_t>(consumed, lcp[i]);
    while (consumed > keep) {
      parser.pop();
      --consumed;
    }
    exit_before.resize(consumed + 1);
    bool alive = true;
    for (size_t k = consumed; k < bytes.size(); ++k) {
      const auto b = static_cast<uint8_t>(bytes[k]);
      const bool exits_here = k > 0 && parser.exit_follow().test(b);
      exit_before.push_back(exit_before[k] || exits_here);
      if (!parser.advance(b)) {
        // Every following token that shares the first k + 1 bytes dies the same way (uncertain or rejected): jump
        // over the trie node of those bytes.
        const bool uncertain = exit_before[k + 1] != 0;
        exit_before.pop_back();
        const size_t end = vocab.subtree_end(i, k + 1);
        if (uncertain)
          for (size_t j = i; j < end; ++j) out.uncertain.push_back(sorted[j]);
        i = end - 1;
        alive = false;
        break;
      }
    }
    if (alive) {
      out.accepted[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
      ++out.accepted_count;
    }
  }
  return out;
}

}  // namespace strata::text::grammar
