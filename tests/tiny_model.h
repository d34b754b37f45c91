#pragma once
// A random-weight `tiny` V4 model for tests that need a model but not particular weights.
#include <memory>
#include <string>

#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "test_util.h"

namespace strata::test {

// `max_rollback`: tokens a state may drop again (Model::rollback).
inline std::unique_ptr<model::v4::Model> tiny_model(const std::string& tag, uint64_t seed, int64_t max_rollback = 1) {
  const std::string dir = temp_dir(tag);
  model::v4::write_random_checkpoint(model::v4::preset_config("tiny"), dir, seed, DType::F32);
  return std::make_unique<model::v4::Model>(
      model::v4::load_model(dir, model::Device::Cpu, model::Precision::Bf16, {}, max_rollback));
}

}  // namespace strata::test
