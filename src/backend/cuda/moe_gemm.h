#pragma once
// The grouped routed-expert products of moe.h as tensor-core GEMM tiles, for steps with many tokens per expert
// (prefill, large decode batches). moe_mma.h keeps a few tokens in accumulators and loads weight fragments straight
// from global memory; here each block computes a 64-token × 64-channel tile of one expert, its token rows gathered
// and its weight tiles streamed into shared memory by cp.async through a three-stage pipeline, so loads for later
// k-slices are in flight while the tensor cores work (bf16 WMMA, fp32 accumulation). FP8 weights are converted to
// bf16 exactly in shared memory (every e4m3 value is a bf16 value) and their 128×128 block scales are applied to
// the accumulators once per 128 columns, so an FP8 expert computes the same products as its dequantized bf16 twin.
// The work items are moe_plan_tiled's tiles (one launch per projection, grid = channel tiles × max tiles).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

// Tokens per tile: the tile_tokens of the plan these kernels take.
constexpr int64_t kMoeGemmTileTokens = 64;

// True when the kernels take weights of `type` (bf16 or fp8) at these widths: whole 64-wide channel tiles and
// k-slices (FP8 scale blocks of 128 then hold whole tiles), and a grid the hardware launches.
bool moe_gemm_supported(GemmType type, int64_t hidden, int64_t inter, int64_t max_tiles);

// Whether the tiles beat moe.cu's SIMT kernels (which stream each expert's weights once per 4 tokens) and
// moe_mma.h for `pairs` (row, expert) pairs among `experts` (the shared one counted), with weights of `type`.
bool moe_gemm_pays(GemmType type, int64_t pairs, int64_t experts);

// As moe_gate_up / moe_down (moe.h) for bf16 operands and bf16 or FP8 (s1/s3/s2: the block-scale tables) weights,
// over a tiled plan. `max_tiles` bounds tiles.count (moe_max_tiles).
void moe_gate_up_gemm(GemmType type, const __nv_bfloat16* x, const MoePlan& plan, const MoeTiles& tiles,
                      int64_t max_tiles, const void* const* w1, const void* const* w3, const float* const* s1,
                      const float* const* s3, int64_t hidden, int64_t inter, float limit, __nv_bfloat16* h,
                      cudaStream_t stream);
void moe_down_gemm(GemmType type, const __nv_bfloat16* h, const MoePlan& plan, const MoeTiles& tiles,
                   int64_t max_tiles, const void* const* w2, const float* const* s2, int64_t inter, int64_t hidden,
                   float* y, cudaStream_t stream);

}  // namespace strata::cuda
