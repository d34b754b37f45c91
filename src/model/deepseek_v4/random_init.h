#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace strata::model::v4 {

// Writes `dir`/config.json and `dir`/model.safetensors with the official DeepSeek-V4 tensor names and random
// weights drawn from `seed`. Every parameter is randomised, including those transformers initialises to zero or
// one (sinks, position biases, hc base/scale, correction bias, tid2eid), so tests exercise all of them.
// Matrices (and embed/head) use `matrix_dtype` (F32 or BF16); norms, biases and mHC parameters stay F32 as in the
// official release.
void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype);

}  // namespace strata::model::v4
