#pragma once
// The tokenizer's vocabulary as the grammar engine sees it: each id's bytes, which ids may never be produced under a
// grammar (special and other added tokens: in DeepSeek's format they are control markup, not text), the
// end-of-sequence id, and the matchable ids sorted by their bytes with each one's common-prefix length with the
// one before — the token trie in flat form, so a walk shares the work for common prefixes.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text {
class Tokenizer;
}

namespace strata::text::grammar {

class TokenVocabulary {
 public:
  // bytes[id] is token id's text; ids with excluded[id] (or empty bytes) are never allowed by a mask, except eos,
  // which is allowed exactly when the grammar can end.
  TokenVocabulary(std::vector<std::string> bytes, std::vector<bool> excluded, std::optional<int32_t> eos_id);
  // Every added token (special or not) excluded, except those spelled as one of `markup`: control tokens a grammar
  // may name (the DSML token of tool calls), matched by their bytes like any token; eos from the tokenizer's config.
  // A `markup` spelling that is not an added token of the tokenizer is an error.
  static TokenVocabulary from_tokenizer(const Tokenizer& tokenizer, const std::vector<std::string_view>& markup = {});

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  // 32-bit words in a mask: ceil(size / 32).
  size_t mask_words() const { return (bytes_.size() + 31) / 32; }
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // Not excluded, not empty and not eos: a token a grammar can produce.
  bool matchable(int32_t id) const { return id >= 0 && id < size() && matchable_[static_cast<size_t>(id)]; }

  // Matchable ids (not excluded, not empty) in byte order, and lcp[i] = common prefix of sorted[i-1] and sorted[i].
  const std::vector<int32_t>& sorted_ids() const { return sorted_; }
  const std::vector<uint32_t>& sorted_lcp() const { return lcp_; }
  // The trie node of sorted[i]'s first `depth` bytes (1 ≤ depth ≤ its length) ends before sorted index
  // subtree_end(i, depth): every index in (i, subtree_end) shares those bytes. A mask walk that rejects a token at
  // byte depth-1 jumps over every token below that node at once, instead of visiting each.
  size_t subtree_end(size_t i, size_t depth) const { return subtree_end_[end_offset_[i] + depth - 1]; }

 private:
  std::vector<std::string> bytes_;
  std::optional<int32_t> eos_id_;
  std::vector<uint8_t> matchable_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> lcp_;
  std::vector<size_t> end_offset_;     // sorted index → its first entry in subtree_end_
  std::vector<uint32_t> subtree_end_;  // per sorted index, one entry per byte of its token
};

}  // namespace strata::text::grammar
