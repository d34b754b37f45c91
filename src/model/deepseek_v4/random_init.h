#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace strata::model::v4 {

// Writes `dir`/config.json and `dir`/model.safetensors with the official DeepSeek-V4 tensor names and random
// weights drawn from `seed`. Every parameter is randomised, including those transformers initialises to zero or
// one (sinks, position biases, hc base/scale, correction bias, tid2eid), so tests exercise all of them.
// `matrix_dtype`: F32 or BF16 for every matrix; F8_E4M3 for e4m3 matrices with fp32 128×128 block scales;
// F4_E2M1X2 for the official V4 layout (MXFP4 routed experts, e4m3 elsewhere, UE8M0 scales). Quantized
// checkpoints keep embed/head and the compressor/indexer projections BF16. Norms, biases and mHC parameters stay
// F32 as in the official release.
void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype);

}  // namespace strata::model::v4
