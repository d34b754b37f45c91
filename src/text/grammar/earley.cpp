#include "text/grammar/earley.h"

#include <algorithm>

namespace strata::text::grammar {

EarleyParser::EarleyParser(const ByteGrammar& grammar) : g_(grammar) {
  predicted_serial_.assign(g_.rules().size(), 0);
  seen_keys_.assign(1024, 0);
  seen_serial_.assign(1024, 0);
  start_end_pos_ = g_.rules()[g_.start_rule()].alt_starts.at(0) + 1;
}

void EarleyParser::push_set() {
  if (++serial_ == UINT32_MAX) {  // after ~4e9 sets: restart the stamps rather than let them collide
    std::fill(predicted_serial_.begin(), predicted_serial_.end(), 0);
    serial_ = 1;
  }
  if (++table_epoch_ == UINT32_MAX) {
    std::fill(seen_serial_.begin(), seen_serial_.end(), 0);
    table_epoch_ = 1;
  }
  seen_count_ = 0;
  set_begin_.push_back(static_cast<uint32_t>(items_.size()));
  exit_follow_.emplace_back();
}

void EarleyParser::add(uint32_t pos, uint32_t origin) {
  if ((seen_count_ + 1) * 2 > seen_keys_.size()) {  // keep the table at most half full
    const size_t size = seen_keys_.size() * 2;
    seen_keys_.assign(size, 0);
    seen_serial_.assign(size, 0);
    table_epoch_ = 1;
    seen_count_ = 0;
    for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
      const uint64_t key = (uint64_t{items_[i].pos} << 32) | items_[i].origin;
      size_t h = (key * 0x9E3779B97F4A7C15ull) >> 20;
      for (h &= size - 1; seen_serial_[h] == table_epoch_; h = (h + 1) & (size - 1)) {}
      seen_keys_[h] = key;
      seen_serial_[h] = table_epoch_;
      ++seen_count_;
    }
  }
  const uint64_t key = (uint64_t{pos} << 32) | origin;
  const size_t mask = seen_keys_.size() - 1;
  size_t h = ((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  for (; seen_serial_[h] == table_epoch_; h = (h + 1) & mask) {
    if (seen_keys_[h] == key) return;
  }
  seen_keys_[h] = key;
  seen_serial_[h] = table_epoch_;
  ++seen_count_;
  items_.push_back({pos, origin});
}

void EarleyParser::predict(uint32_t rule, uint32_t set) {
  if (predicted_serial_[rule] == serial_) return;
  predicted_serial_[rule] = serial_;
  // Alternative starts are only ever added here, so the per-rule stamp deduplicates them.
  for (uint32_t p : g_.rules()[rule].alt_starts) items_.push_back({p, set});
}

bool EarleyParser::in_set(uint32_t set, uint32_t pos) const {
  const uint32_t end = set + 1 < set_begin_.size() ? set_begin_[set + 1] : static_cast<uint32_t>(items_.size());
  for (uint32_t i = set_begin_[set]; i < end; ++i) {
    if (items_[i].pos == pos) return true;
  }
  return false;
}

void EarleyParser::close(uint32_t set) {
  const auto& symbols = g_.symbols();
  const auto& rules = g_.rules();
  for (size_t i = set_begin_[set]; i < items_.size(); ++i) {
    const EarleyItem item = items_[i];
    const Symbol s = symbols[item.pos];
    if (s.kind == Symbol::Kind::kRule) {
      predict(s.id, set);
      if (rules[s.id].nullable) add(item.pos + 1, item.origin);
    } else if (s.kind == Symbol::Kind::kEnd && item.origin != set) {
      const uint32_t begin = set_begin_[item.origin];
      const uint32_t end = set_begin_[item.origin + 1];
      for (uint32_t j = begin; j < end; ++j) {
        const EarleyItem waiter = items_[j];
        const Symbol w = symbols[waiter.pos];
        if (w.kind == Symbol::Kind::kRule && w.id == s.id) add(waiter.pos + 1, waiter.origin);
      }
      if (item.origin < virtual_sets_) {
        // The rule may also have waiters the virtual set does not hold: then what follows is unknown here.
        bool all_known = true;
        for (uint32_t ref : rules[s.id].references) all_known = all_known && in_set(item.origin, ref);
        if (!all_known) exit_follow_[set] |= rules[s.id].follow;
      }
    }
  }
}

void EarleyParser::start() {
  items_.clear();
  set_begin_.clear();
  exit_follow_.clear();
  virtual_sets_ = 0;
  push_set();
  predict(g_.start_rule(), 0);
  close(0);
}

void EarleyParser::start_isolated(uint32_t pos, int max_parents) {
  items_.clear();
  set_begin_.clear();
  exit_follow_.clear();
  // The chain of rules whose origins the virtual sets stand for: the item's rule, then each rule's unique parent.
  std::vector<uint32_t> chain{g_.rule_of(pos)};
  std::vector<uint32_t> parent_pos;
  while (static_cast<int>(parent_pos.size()) < max_parents) {
    const uint32_t parent = g_.rules()[chain.back()].unique_parent;
    if (parent == kNoParent || g_.rule_of(parent) == g_.start_rule()) break;
    parent_pos.push_back(parent);
    chain.push_back(g_.rule_of(parent));
  }
  const auto levels = static_cast<uint32_t>(chain.size());
  virtual_sets_ = levels;
  // Set v stands for where chain[levels - 1 - v] began: it predicted that rule and holds its parent's item.
  for (uint32_t v = 0; v < levels; ++v) {
    push_set();
    const uint32_t level = levels - 1 - v;
    if (level < parent_pos.size()) add(parent_pos[level], v - 1);
    predict(chain[level], v);
    close(v);
  }
  push_set();
  add(pos, levels - 1);
  close(levels);
}

bool EarleyParser::advance(uint8_t byte) {
  const uint32_t from = set_begin_.back();
  const auto to = static_cast<uint32_t>(items_.size());
  const auto set = static_cast<uint32_t>(set_begin_.size());
  push_set();
  const auto& symbols = g_.symbols();
  const auto& terminals = g_.terminals();
  for (uint32_t i = from; i < to; ++i) {
    const EarleyItem item = items_[i];
    const Symbol s = symbols[item.pos];
    if (s.kind == Symbol::Kind::kTerminal && terminals[s.id].test(byte)) add(item.pos + 1, item.origin);
  }
  if (items_.size() == to) {
    set_begin_.pop_back();
    exit_follow_.pop_back();
    return false;
  }
  close(set);
  return true;
}

void EarleyParser::pop() {
  if (depth() <= 1) return;
  items_.resize(set_begin_.back());
  set_begin_.pop_back();
  exit_follow_.pop_back();
}

bool EarleyParser::accepts_end() const {
  if (virtual_sets_ != 0) return false;
  for (const EarleyItem& item : top()) {
    if (item.pos == start_end_pos_ && item.origin == 0) return true;
  }
  return false;
}

ByteSet EarleyParser::next_bytes() const {
  ByteSet out;
  for (const EarleyItem& item : top()) {
    const Symbol s = g_.symbols()[item.pos];
    if (s.kind == Symbol::Kind::kTerminal) out |= g_.terminals()[s.id];
  }
  return out;
}

}  // namespace strata::text::grammar
