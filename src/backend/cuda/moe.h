#pragma once
// Routed experts of a decode-sized step on the device, with no host round trip: the routing is grouped by expert
// on the GPU (moe_plan), then one launch computes every active expert's gate/up projections with the SwiGLU fused,
// and one launch its down projection. Each expert's weights are read once per step, which is what bounds decode.
// Larger steps (prefill) are planned in chunks of rows (moe_plan_tiled) for the tensor-core kernels of moe_gemm.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/ops.h"

namespace strata::cuda {

// Where each routed (row, expert) pair goes: pairs grouped by expert in ascending expert order, rows ascending
// within an expert (the CPU reference's order).
struct MoePlan {
  int32_t* pair_row = nullptr;      // [pairs] the row of each grouped pair
  int32_t* expert_start = nullptr;  // [experts + 1] first grouped pair of each expert
  int32_t* active = nullptr;        // [experts] the experts with pairs, ascending
  int32_t* n_active = nullptr;      // [1]
  int32_t* slot = nullptr;          // [rows, k] each row's grouped pairs in ascending expert order
  float* slot_weight = nullptr;     // [rows, k] their routing weights
};

// One block plans the whole step, so the device path takes steps of at most this many (row, expert) pairs.
constexpr int64_t kMoePlanMaxPairs = 4096;

// The plan of `rows` rows routed to ids[rows, k] with weights[rows, k] among `experts` experts. With
// `shared_expert`, every row also goes to expert number `experts` (the shared one) with weight 1, last in its slots:
// the combine then adds it after the routed sum, as the CPU reference does, and it costs no launches of its own.
void moe_plan(const int32_t* ids, const float* weights, int64_t rows, int64_t k, int64_t experts, bool shared_expert,
              const MoePlan& plan, cudaStream_t stream);

// The plan of any number of pairs (prefill), in three launches over chunks of rows, with the same layout as
// moe_plan's (rows ascending within an expert) plus `tiles`: each active expert's pairs cut into runs of
// `tile_tokens`, the work items of the tensor-core GEMM (moe_gemm.h). `work` holds moe_plan_work_ints(rows,
// experts) ints; `experts` and `k` count as in moe_plan (without the shared expert).
struct MoeTiles {
  int32_t* expert = nullptr;  // [max tiles] the tile's expert
  int32_t* start = nullptr;   // [max tiles] its first grouped pair
  int32_t* count = nullptr;   // [1] tiles in use
};
// An upper bound of the tiles a plan of `pairs` pairs among `experts` experts (the shared one counted) makes.
int64_t moe_max_tiles(int64_t pairs, int64_t experts, int64_t tile_tokens);
int64_t moe_plan_work_ints(int64_t rows, int64_t experts);
void moe_plan_tiled(const int32_t* ids, const float* weights, int64_t rows, int64_t k, int64_t experts,
                    bool shared_expert, const MoePlan& plan, const MoeTiles& tiles, int64_t tile_tokens, int32_t* work,
                    cudaStream_t stream);

// True when the grouped kernels take these widths (whole 16-byte vectors per row) for weights of `type`.
bool moe_grouped_supported(GemmType type, int64_t hidden, int64_t inter);

// h[p] = silu(min(W1_e·x, L)) · clamp(W3_e·x, −L, L) for x = x[pair_row[p]], every pair p of every active expert e.
// `type` is the weights': w1/w3 are device tables of each expert's [inter, hidden] matrix, and for Fp8 s1/s3 the
// tables of their 128×128 block scales (else null). x [rows, hidden] and h [pairs, inter] are GEMM operands of
// `type`, bf16 for Fp8 weights (weight-only FP8). `max_active` bounds the active experts (min(experts, pairs)):
// the grid's size.
void moe_gate_up(GemmType type, const void* x, const MoePlan& plan, int64_t max_active, const void* const* w1,
                 const void* const* w3, const float* const* s1, const float* const* s3, int64_t hidden, int64_t inter,
                 float limit, void* h, cudaStream_t stream);

// y[p] = W2_e · h[p] (fp32) for every pair p of every active expert e; w2 holds [hidden, inter] matrices (s2
// their scales for Fp8).
void moe_down(GemmType type, const void* h, const MoePlan& plan, int64_t max_active, const void* const* w2,
              const float* const* s2, int64_t inter, int64_t hidden, float* y, cudaStream_t stream);

}  // namespace strata::cuda
