#include "text/grammar/token_vocabulary.h"

#include <algorithm>

#include "core/error.h"
#include "text/tokenizer.h"

namespace strata::text::grammar {

TokenVocabulary::TokenVocabulary(std::vector<std::string> bytes, std::vector<bool> excluded,
                                 std::optional<int32_t> eos_id)
    : bytes_(std::move(bytes)), eos_id_(eos_id) {
  if (excluded.size() != bytes_.size()) {
    fail("token vocabulary: ", bytes_.size(), " token strings but ", excluded.size(), " exclusion flags");
  }
  if (eos_id_ && (*eos_id_ < 0 || *eos_id_ >= size())) {
    fail("token vocabulary: eos id ", *eos_id_, " is outside the vocabulary of ", size(), " ids");
  }
  for (int32_t id = 0; id < size(); ++id) {
    if (!excluded[static_cast<size_t>(id)] && !bytes_[static_cast<size_t>(id)].empty() && id != eos_id_) {
      sorted_.push_back(id);
    }
  }
  matchable_.assign(bytes_.size(), 0);
  for (int32_t id : sorted_) matchable_[static_cast<size_t>(id)] = 1;
  std::sort(sorted_.begin(), sorted_.end(), [this](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& a = bytes_[static_cast<size_t>(sorted_[i - 1])];
    const std::string& b = bytes_[static_cast<size_t>(sorted_[i])];
    const size_t n = std::min(a.size(), b.size());
    uint32_t k = 0;
    while (k < n && a[k] == b[k]) ++k;
    lcp_[i] = k;
  }
  end_offset_.assign(sorted_.size() + 1, 0);
  for (size_t i = 0; i < sorted_.size(); ++i)
    end_offset_[i + 1] = end_offset_[i] + bytes_[static_cast<size_t>(sorted_[i])].size();
  subtree_end_.assign(end_offset_.back(), 0);
  // Backwards: the node of i's first d bytes ends at i + 1 unless token i + 1 shares those d bytes (lcp ≥ d: it is
  // at least d long), where it ends where i + 1's node of d bytes ends.
  for (size_t i = sorted_.size(); i-- > 0;) {
    const size_t len = end_offset_[i + 1] - end_offset_[i];
    for (size_t d = 1; d <= len; ++d) {
      const bool shared = i + 1 < sorted_.size() && lcp_[i + 1] >= d;
      subtree_end_[end_offset_[i] + d - 1] =
          shared ? subtree_end_[end_offset_[i + 1] + d - 1] : static_cast<uint32_t>(i + 1);
    }
  }
}

TokenVocabulary TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer, const std::vector<std::string_view>& markup) {
  const int32_t n = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  for (int32_t id = 0; id < n; ++id) bytes[static_cast<size_t>(id)] = std::string(tokenizer.token_bytes(id, false));
  std::vector<bool> found(markup.size(), false);
  for (const AddedToken& added : tokenizer.added_tokens()) {
    const auto named = std::find(markup.begin(), markup.end(), added.content);
    if (named != markup.end()) {
      found[static_cast<size_t>(named - markup.begin())] = true;
      continue;
    }
    if (added.id >= 0 && added.id < n) excluded[static_cast<size_t>(added.id)] = true;
  }
  for (size_t i = 0; i < markup.size(); ++i)
    if (!found[i]) fail("token vocabulary: \"", markup[i], "\" is not an added token of the tokenizer");
  return TokenVocabulary(std::move(bytes), std::move(excluded), tokenizer.eos_id());
}

}  // namespace strata::text::grammar
