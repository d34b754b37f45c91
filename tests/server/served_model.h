#pragma once
// The model the server tests serve: the `tiny` V4 preset with random weights and the DeepSeek tokenizer (V3's
// tokenizer.json plus the V4 added tokens), its vocabulary rounded up to a multiple of 128 to fit the tokenizer.
#include <filesystem>
#include <string>

#include "core/dtype.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"

namespace strata::test {

inline std::string tokenizer_v3_dir() { return std::string(STRATA_TEST_DATA) + "/tokenizer-deepseek_v3"; }

inline bool have_tokenizer() { return std::filesystem::exists(tokenizer_v3_dir() + "/tokenizer.json"); }

// Writes the model into a fresh temp directory (once per process) and returns it.
inline const std::string& served_model_dir() {
  static const std::string dir = [] {
    const std::string d = temp_dir("served_model");
    text::write_test_tokenizer(tokenizer_v3_dir(), d);
    const text::Tokenizer tokenizer = text::Tokenizer::load(d);
    model::ModelConfig cfg = model::v4::preset_config("tiny");
    cfg.vocab_size = (tokenizer.vocab_size() + 127) / 128 * 128;
    model::v4::write_random_checkpoint(cfg, d, 11, DType::BF16);
    return d;
  }();
  return dir;
}

}  // namespace strata::test
