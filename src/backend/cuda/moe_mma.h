#pragma once
// The grouped routed-expert products of moe.h on tensor cores (bf16 operands, fp32 accumulation; moe_mma.cu).
// The SIMT kernels of moe.cu stream each expert's weights once per 4 tokens, so an expert with many tokens — the
// shared expert, which every row visits, or any expert at batch 64 and beyond — re-reads its weights many times
// and the step becomes compute-bound on CUDA cores (14 ms per V4-Flash layer at batch 256 on the H200). Here a
// block keeps up to 32 tokens of one expert (MoeMmaShape's default) in tensor-core accumulators while its 16-row
// weight tiles stream by once. Same plan, same contract and same results up to summation order as moe_gate_up /
// moe_down.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/moe.h"

namespace strata::cuda {

// True when the tensor-core kernels take these widths: whole 16×16 tiles.
bool moe_mma_supported(int64_t hidden, int64_t inter);

// Whether the tensor-core kernels beat moe.cu's SIMT ones for `pairs` (row, expert) pairs among `experts` (the
// shared one counted). Measured on the H200 with V4-Flash layers (8 of them, context 4096; bench/results/
// cuda_flash8_h200_decode_mma.json): SIMT is faster up to batch 64 (≤ 1.75 pairs per expert: the weights stream
// once either way, and the SIMT kernel streams them faster), tensor cores from batch 128 (3 per expert: 63 vs 73 ms
// per step; at 256, 85 vs 139 ms).
bool moe_mma_pays(int64_t pairs, int64_t experts);

// A kernel's blocking: 16-token tiles kept in accumulators per pass over an expert's weights (an expert with more
// tokens takes more passes), and warps per block (16 output channels each).
struct MoeMmaShape {
  int token_tiles = 2;  // the fastest or within 3% of it at every batch measured (cuda_moe_mma_shapes_h200.json)
  int warps = 4;
};
// Every shape compiled (tests/gpu/moe_bench.cpp times them).
const std::vector<MoeMmaShape>& moe_mma_shapes();

// As moe_gate_up for bf16 operands.
void moe_gate_up_mma(const __nv_bfloat16* x, const MoePlan& plan, int64_t max_active, const void* const* w1,
                     const void* const* w3, int64_t hidden, int64_t inter, float limit, __nv_bfloat16* h,
                     cudaStream_t stream, MoeMmaShape shape = {});

// As moe_down for bf16 operands.
void moe_down_mma(const __nv_bfloat16* h, const MoePlan& plan, int64_t max_active, const void* const* w2,
                  int64_t inter, int64_t hidden, float* y, cudaStream_t stream, MoeMmaShape shape = {});

}  // namespace strata::cuda
