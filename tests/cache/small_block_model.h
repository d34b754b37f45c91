#pragma once
// The prefix-cache tests' model: the tiny preset with compression rates 4 and 16 and a 16-token window, so token
// blocks hold 16 tokens and short prompts cross many block boundaries (random weights, written once per process).
#include <string>

#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"

namespace strata::cache::test_models {

inline model::v4::Model& small_block_model() {
  static model::v4::Model* m = [] {
    model::ModelConfig c = model::v4::preset_config("tiny");
    c.hca_compress_rate = 16;
    c.sliding_window = 16;
    const std::string dir = test::temp_dir("prefix_cache_model");
    model::v4::write_random_checkpoint(c, dir, 5, DType::F32);
    return new model::v4::Model(model::v4::load_model(dir));
  }();
  return *m;
}

}  // namespace strata::cache::test_models
