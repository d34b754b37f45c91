#include "server/stop_matcher.h"

#include <algorithm>

namespace strata::server {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  if (stops_.empty()) return std::string(text);
  held_.append(text);
  // Generation stops the moment the text contains a stop string: the match that ends first wins (of two ending at
  // the same byte, the longer). Deciding by where a match ends, not where it starts, is what makes the result
  // independent of how the text was split.
  size_t best = std::string::npos, best_end = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at == std::string::npos) continue;
    const size_t end = at + stop.size();
    if (end < best_end || (end == best_end && stop.size() > best_stop->size())) {
      best = at;
      best_end = end;
      best_stop = &stop;
    }
  }
  if (best_stop) {
    stopped_ = true;
    matched_ = *best_stop;
    std::string out = held_.substr(0, include_stop_ ? best + best_stop->size() : best);
    held_.clear();
    return out;
  }
  // Everything before the longest tail that could still grow into a stop string is safe. That tail starts where a
  // stop string starts, so the cut falls on a UTF-8 character boundary whenever the stop strings are valid UTF-8.
  const size_t keep = held_suffix_length();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  std::string out;
  out.swap(held_);
  return out;
}

size_t StopMatcher::held_suffix_length() const {
  size_t longest = 0;
  for (const std::string& stop : stops_) {
    const size_t max_len = std::min(stop.size() - 1, held_.size());
    for (size_t len = max_len; len > longest; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(stop).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

}  // namespace strata::server
