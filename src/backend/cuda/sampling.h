#pragma once
// Random picks where the logits are (SequenceChunk::sample_only): temperature, top-k, min-p and top-p with the
// engine's draw, one block per row, only the token id coming home. The method is in sampling.cu.
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// One row's pick: engine::sample_token's parameters (no penalties, no logprobs) and its draw.
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

}  // namespace strata::cuda
