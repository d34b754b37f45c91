#pragma once
// A grammar vocabulary over the tiny presets' ids for engine tests of structured outputs: id 0 bos (excluded), id 1
// eos, ids 2-27 the letters a-z, every other id unmatchable filler ("#id").
#include <memory>
#include <string>
#include <vector>

#include "text/grammar/compiled_grammar.h"

namespace strata::test {

inline std::shared_ptr<const text::grammar::TokenVocabulary> letter_vocabulary(int64_t vocab) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  std::vector<bool> excluded(bytes.size(), false);
  bytes[0] = "<bos>";
  excluded[0] = true;
  bytes[1] = "<eos>";
  for (size_t id = 2; id < bytes.size(); ++id)
    bytes[id] = id < 28 ? std::string(1, static_cast<char>('a' + id - 2)) : "#" + std::to_string(id);
  return std::make_shared<const text::grammar::TokenVocabulary>(std::move(bytes), std::move(excluded), 1);
}

}  // namespace strata::test
