#include "text/grammar/grammar_matcher.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace strata::text::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), parser_(grammar_->byte_grammar()) {
  kernel_seen_.assign(grammar_->byte_grammar().symbols().size(), 0);
  parser_.start();
}

void GrammarMatcher::reset() {
  parser_.start();
  steps_.clear();
  terminated_ = false;
}

bool GrammarMatcher::push_bytes(std::string_view bytes) {
  const size_t before = parser_.depth();
  for (const char c : bytes) {
    if (!parser_.advance(static_cast<uint8_t>(c))) {
      while (parser_.depth() > before) parser_.pop();
      return false;
    }
  }
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (terminated_) return false;
  const TokenVocabulary& vocab = grammar_->vocabulary();
  const size_t before = parser_.depth();
  if (vocab.eos_id() && id == *vocab.eos_id()) {
    if (!parser_.accepts_end()) return false;
    steps_.push_back({before, true});
    terminated_ = true;
    return true;
  }
  if (!vocab.matchable(id) || !push_bytes(vocab.bytes(id))) return false;
  steps_.push_back({before, false});
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  const size_t before = parser_.depth();
  if (!push_bytes(bytes)) return false;
  steps_.push_back({before, false});
  return true;
}

void GrammarMatcher::rollback(int n) {
  if (n < 0 || n > steps()) fail("grammar matcher: cannot roll back ", n, " steps, only ", steps(), " were accepted");
  for (; n > 0; --n) {
    const Step step = steps_.back();
    steps_.pop_back();
    while (parser_.depth() > step.depth_before) parser_.pop();
    if (step.eos) terminated_ = false;
  }
}

// Walks tokens the cache could not decide through the real parser, in byte order so that a prefix shared with the
// previous token is not consumed again, and a prefix that died kills every token after it that shares it.
void GrammarMatcher::check_uncertain(const std::vector<int32_t>& ids, uint32_t* words) {
  const TokenVocabulary& vocab = grammar_->vocabulary();
  const size_t base = parser_.depth();
  std::string_view path;  // the last token walked; the parser stands on its first depth() - base bytes
  std::string_view failed;
  for (const int32_t id : ids) {
    if ((words[id / 32] >> (id % 32)) & 1) continue;
    const std::string_view bytes = vocab.bytes(id);
    if (!failed.empty() && bytes.size() >= failed.size() && bytes.compare(0, failed.size(), failed) == 0) continue;
    size_t consumed = parser_.depth() - base;
    size_t common = 0;
    const size_t limit = std::min(consumed, bytes.size());
    while (common < limit && path[common] == bytes[common]) ++common;
    for (; consumed > common; --consumed) parser_.pop();
    path = bytes;
    bool alive = true;
    for (size_t k = consumed; k < bytes.size(); ++k) {
      if (!parser_.advance(static_cast<uint8_t>(bytes[k]))) {
        failed = bytes.substr(0, k + 1);
        alive = false;
        break;
      }
    }
    if (alive) words[id / 32] |= 1u << (id % 32);
  }
  while (parser_.depth() > base) parser_.pop();
}

void GrammarMatcher::fill_mask(uint32_t* words) {
  const TokenVocabulary& vocab = grammar_->vocabulary();
  const size_t n_words = vocab.mask_words();
  std::memset(words, 0, n_words * sizeof(uint32_t));
  if (terminated_) return;
  if (++fill_serial_ == 0) {
    std::fill(kernel_seen_.begin(), kernel_seen_.end(), 0);
    fill_serial_ = 1;
  }
  kernel_scratch_.clear();
  for (const EarleyItem& item : parser_.top()) {
    if (kernel_seen_[item.pos] == fill_serial_ || !grammar_->is_kernel(item.pos)) continue;
    kernel_seen_[item.pos] = fill_serial_;
    kernel_scratch_.push_back(item.pos);
  }
  for (const uint32_t pos : kernel_scratch_) {
    const PositionMask& cached = grammar_->position_mask(pos);
    if (cached.accepted_count == 0) continue;
    const uint32_t* src = cached.accepted.data();
    for (size_t i = 0; i < n_words; ++i) words[i] |= src[i];
  }
  for (const uint32_t pos : kernel_scratch_) {
    const PositionMask& cached = grammar_->position_mask(pos);
    if (!cached.uncertain.empty()) check_uncertain(cached.uncertain, words);
  }
  if (vocab.eos_id() && parser_.accepts_end()) words[*vocab.eos_id() / 32] |= 1u << (*vocab.eos_id() % 32);
}

}  // namespace strata::text::grammar
