#pragma once
// The sampling stage on the device (model/logits_stage.h): random picks where the logits are (temperature, top-k,
// min-p and top-p with the engine's draw, one block per row, only the token id coming home) and the logit
// processors before them (penalties). The methods are in sampling.cu; backend/cpu/sampling.cpp is the reference.
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// One row's random pick: model::TokenPick as the kernel reads it.
struct RowPick {
  double inv_temperature = 1.0;  // 1 / temperature, as the host sampler computes it
  double top_p = 1.0;
  double min_p = 0.0;
  double uniform = 0.0;  // counter_uniform(seed, step), computed on the host
  int32_t top_k = 0;     // 0 = off
  int32_t row = 0;       // the row of x
};

// What the kernel writes for a row it leaves to the host sampler (rare and pathological: see sampling.cu).
constexpr int32_t kPickOnHost = -1;

// out[i] = the token chosen for picks[i] (device arrays), or kPickOnHost.
void sample_rows(const float* x, int64_t cols, const RowPick* picks, int64_t count, int32_t* out, cudaStream_t stream);

// One penalty on one logit: repetition (value = the penalty; l / value if l > 0, else l · value) or subtraction
// (l -= value).
struct PenaltyEntry {
  int32_t row = 0;  // the row of x
  int32_t id = 0;   // the column
  float value = 0;
};

// Applies every repetition entry, then every subtraction, to x [*, cols] in place (device arrays of entries; within
// each list a (row, id) appears at most once).
void apply_penalties(float* x, int64_t cols, const PenaltyEntry* repetition, int64_t n_repetition,
                     const PenaltyEntry* subtract, int64_t n_subtract, cudaStream_t stream);

// Sets x[rows[i], id] = -inf for every id whose bit is clear in words[i · n_words …] (model::TokenMask's layout:
// bit id % 32 of word id / 32), for i < count (device arrays).
void mask_rows(float* x, int64_t cols, const int32_t* rows, const uint32_t* words, int64_t n_words, int64_t count,
               cudaStream_t stream);

}  // namespace strata::cuda
