#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"
#include "model/deepseek_v4/weights.h"

namespace strata::model::v4 {

// Writes `dir`/config.json and `dir`/model.safetensors with the official DeepSeek-V4 tensor names and random
// weights drawn from `seed`. Every parameter is randomised, including those transformers initialises to zero or
// one (sinks, position biases, hc base/scale, correction bias, tid2eid), so tests exercise all of them.
// `matrix_dtype`: F32 or BF16 for every matrix; F8_E4M3 for e4m3 matrices with fp32 128×128 block scales;
// F4_E2M1X2 for the official V4 layout (MXFP4 routed experts, e4m3 elsewhere, UE8M0 scales). Quantized
// checkpoints keep embed/head and the compressor/indexer projections BF16. Norms, biases and mHC parameters stay
// F32 as in the official release.
// `fill`: Exact draws every value from its distribution (normals, per-block amax scales: tens of ns a value, so
// minutes for one V4-Flash layer; the values tests and parity fixtures are pinned to); Fast writes what
// random_weights (below) makes in memory — uniform values with the same mean and standard deviation, filled by every
// OpenMP thread — for checkpoints of real V4-Flash layers that benchmarks load (F32, BF16 or F8_E4M3 only).
enum class RandomFill { Exact, Fast };
void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype,
                             RandomFill fill = RandomFill::Exact);

// The config a random checkpoint with `matrix_dtype` matrices declares: `config` plus its quantization_config
// (FP8 / FP4). An error for any other dtype than F32, BF16, F8_E4M3 or F4_E2M1X2.
ModelConfig random_checkpoint_config(const ModelConfig& config, DType matrix_dtype);

// The same tensors as write_random_checkpoint (names, shapes, dtypes, FP8 block scales; `config` as
// random_checkpoint_config returns it), made straight in host memory for benchmarks, where a checkpoint of real
// V4-Flash layers would be too big and slow to write. Values come from a fast generator filled by all OpenMP
// threads: uniform draws with each parameter's mean and standard deviation, deterministic in `seed` (whatever the
// thread count) but not the values write_random_checkpoint writes. Routing stays realistic: the router and its
// correction bias are random, so tokens spread over the experts. `matrix_dtype`: F32, BF16 or F8_E4M3.
// Fails, saying how much is needed, when the machine lacks the memory.
ModelWeights random_weights(const ModelConfig& config, uint64_t seed, DType matrix_dtype);

}  // namespace strata::model::v4
