#pragma once
// Stop strings on streamed text: text arrives in pieces (one per token, cut anywhere), text is released as soon
// as it can no longer be the start of a stop string, and generation ends as soon as the text contains a stop
// string (the occurrence that ends first; of two ending together, the longer), which is not released unless
// asked. Released text concatenated is the same however the text was split.
#include <string>
#include <string_view>
#include <vector>

namespace strata::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Text that is safe to release now. After a match, returns the text before it (plus the stop string when
  // include_stop) and stopped() turns true; later calls return nothing.
  std::string push(std::string_view text);
  // End of the text: releases what was held back (it cannot complete a stop string any more).
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that ended the text

 private:
  size_t held_suffix_length() const;  // longest tail of held_ that is a proper prefix of some stop string

  std::vector<std::string> stops_;
  bool include_stop_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace strata::server
