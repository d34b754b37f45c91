#include <mma.h>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "backend/cuda/moe_mma.h"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kSlice = 128;             // operand columns staged in shared memory at a time
constexpr int kStagedRow = kSlice + 8;  // padded staged row: rows start in different banks

using AccFragment = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using TokenFragment = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
// A weight tile W[n0 .. n0+16, k .. k+16] of a row-major [out, in] matrix is the col-major 16×16 B operand
// B[k][n] = W[n][k] with leading dimension `in`: it loads straight from global memory, each row's 32 bytes whole.
using WeightFragment = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;

// One block = one active expert × 16·kWarps output channels (one 16-wide tile per warp). For each pass of up to
// 16·kTokenTiles of the expert's tokens (held in accumulators while the weights stream by), the tokens' operand
// columns are staged kSlice at a time and every warp multiplies them by its weight tiles; kGateUp: W1 and W3 side
// by side, their outputs meeting in the clamped SwiGLU (bf16 out); otherwise one matrix, fp32 out.
template <bool kGateUp, int kTokenTiles, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    moe_mma_kernel(const bf16* __restrict__ x, bool x_by_row, MoePlan plan, const bf16* const* wa,
                   const bf16* const* wb, int64_t in, int64_t out_width, float limit, void* out) {
  constexpr int kTokens = 16 * kTokenTiles, kChannels = 16 * kWarps;
  const int slot = blockIdx.x;
  if (slot >= *plan.n_active) return;
  const int e = plan.active[slot];
  const int p0 = plan.expert_start[e], p1 = plan.expert_start[e + 1];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kChannels + warp * 16;
  const bool warp_has_channels = n0 < out_width;  // out_width is a multiple of 16
  __shared__ __align__(32) bf16 staged[kTokens * kStagedRow];
  __shared__ __align__(32) float tile[kWarps][kGateUp ? 2 : 1][16 * 16];
  const bf16* a = warp_has_channels ? wa[e] + n0 * in : nullptr;
  const bf16* b = kGateUp && warp_has_channels ? wb[e] + n0 * in : nullptr;

  for (int pt = p0; pt < p1; pt += kTokens) {
    const int nt = min(kTokens, p1 - pt);
    const int token_tiles = (nt + 15) / 16;
    AccFragment acc_a[kTokenTiles], acc_b[kTokenTiles];
#pragma unroll
    for (int m = 0; m < kTokenTiles; ++m) {
      wmma::fill_fragment(acc_a[m], 0.0f);
      if constexpr (kGateUp) wmma::fill_fragment(acc_b[m], 0.0f);
    }
    for (int64_t k0 = 0; k0 < in; k0 += kSlice) {
      const int width = static_cast<int>(min(static_cast<int64_t>(kSlice), in - k0));  // a multiple of 16
      const int vectors = width / 8;                                                   // 16-byte vectors per row
      __syncthreads();  // the previous slice has been consumed
      for (int i = threadIdx.x; i < kTokens * vectors; i += blockDim.x) {
        const int t = i / vectors, v = i % vectors;
        uint4 value = make_uint4(0, 0, 0, 0);  // tokens past the expert's last are zeros (their rows are dropped)
        if (t < nt) {
          const int64_t row = x_by_row ? plan.pair_row[pt + t] : pt + t;
          value = *reinterpret_cast<const uint4*>(x + row * in + k0 + v * 8);
        }
        *reinterpret_cast<uint4*>(staged + t * kStagedRow + v * 8) = value;
      }
      __syncthreads();
      if (!warp_has_channels) continue;
      // The next weight tiles load while the current ones multiply: the loop is bound by loads in flight.
      WeightFragment wa_tile, wb_tile, wa_next, wb_next;
      wmma::load_matrix_sync(wa_tile, a + k0, static_cast<unsigned>(in));
      if constexpr (kGateUp) wmma::load_matrix_sync(wb_tile, b + k0, static_cast<unsigned>(in));
      for (int kk = 0; kk < width; kk += 16) {
        if (kk + 16 < width) {
          wmma::load_matrix_sync(wa_next, a + k0 + kk + 16, static_cast<unsigned>(in));
          if constexpr (kGateUp) wmma::load_matrix_sync(wb_next, b + k0 + kk + 16, static_cast<unsigned>(in));
        }
#pragma unroll
        for (int m = 0; m < kTokenTiles; ++m) {
          if (m >= token_tiles) break;
          TokenFragment tokens;
          wmma::load_matrix_sync(tokens, staged + m * 16 * kStagedRow + kk, kStagedRow);
          wmma::mma_sync(acc_a[m], tokens, wa_tile, acc_a[m]);
          if constexpr (kGateUp) wmma::mma_sync(acc_b[m], tokens, wb_tile, acc_b[m]);
        }
        wa_tile = wa_next;
        if constexpr (kGateUp) wb_tile = wb_next;
      }
    }
    if (!warp_has_channels) continue;
    // Epilogue through shared memory (a fragment's element layout is opaque): one 16×16 tile per matrix at a time.
#pragma unroll
    for (int m = 0; m < kTokenTiles; ++m) {
      if (m >= token_tiles) break;
      wmma::store_matrix_sync(tile[warp][0], acc_a[m], 16, wmma::mem_row_major);
      if constexpr (kGateUp) wmma::store_matrix_sync(tile[warp][1], acc_b[m], 16, wmma::mem_row_major);
      __syncwarp();
      for (int i = lane; i < 256; i += 32) {
        const int t = m * 16 + i / 16;
        if (t >= nt) continue;
        const int64_t at = static_cast<int64_t>(pt + t) * out_width + n0 + i % 16;
        if constexpr (kGateUp) {
          const float g = fminf(tile[warp][0][i], limit), u = fminf(fmaxf(tile[warp][1][i], -limit), limit);
          static_cast<bf16*>(out)[at] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
        } else {
          static_cast<float*>(out)[at] = tile[warp][0][i];
        }
      }
      __syncwarp();
    }
  }
}

template <bool kGateUp, int kTokenTiles, int kWarps>
void launch_shape(const bf16* x, bool x_by_row, const MoePlan& plan, int64_t max_active, const void* const* wa,
                  const void* const* wb, int64_t in, int64_t out_width, float limit, void* out, cudaStream_t stream) {
  constexpr int kChannels = 16 * kWarps;
  const dim3 grid(static_cast<unsigned>(max_active), static_cast<unsigned>((out_width + kChannels - 1) / kChannels));
  moe_mma_kernel<kGateUp, kTokenTiles, kWarps><<<grid, kWarps * 32, 0, stream>>>(
      x, x_by_row, plan, reinterpret_cast<const bf16* const*>(wa), reinterpret_cast<const bf16* const*>(wb), in,
      out_width, limit, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <bool kGateUp>
void launch(MoeMmaShape shape, const bf16* x, bool x_by_row, const MoePlan& plan, int64_t max_active,
            const void* const* wa, const void* const* wb, int64_t in, int64_t out_width, float limit, void* out,
            cudaStream_t stream) {
  if (max_active == 0) return;
#define STRATA_MOE_MMA_SHAPE(TILES, WARPS)                                                                    \
  if (shape.token_tiles == TILES && shape.warps == WARPS)                                                    \
    return launch_shape<kGateUp, TILES, WARPS>(x, x_by_row, plan, max_active, wa, wb, in, out_width, limit, out, \
                                               stream);
  STRATA_MOE_MMA_SHAPE(1, 4)
  STRATA_MOE_MMA_SHAPE(2, 4)
  STRATA_MOE_MMA_SHAPE(4, 4)
  STRATA_MOE_MMA_SHAPE(1, 8)
  STRATA_MOE_MMA_SHAPE(2, 8)
  STRATA_MOE_MMA_SHAPE(4, 8)
#undef STRATA_MOE_MMA_SHAPE
  fail("moe_mma: no kernel for ", shape.token_tiles, " token tiles × ", shape.warps, " warps");
}

}  // namespace

bool moe_mma_supported(int64_t hidden, int64_t inter) { return hidden % 16 == 0 && inter % 16 == 0; }

bool moe_mma_pays(int64_t pairs, int64_t experts) { return pairs >= 2 * experts; }

const std::vector<MoeMmaShape>& moe_mma_shapes() {
  static const std::vector<MoeMmaShape> shapes = {{1, 4}, {2, 4}, {4, 4}, {1, 8}, {2, 8}, {4, 8}};
  return shapes;
}

void moe_gate_up_mma(const bf16* x, const MoePlan& plan, int64_t max_active, const void* const* w1,
                     const void* const* w3, int64_t hidden, int64_t inter, float limit, bf16* h, cudaStream_t stream,
                     MoeMmaShape shape) {
  launch<true>(shape, x, true, plan, max_active, w1, w3, hidden, inter, limit, h, stream);
}

void moe_down_mma(const bf16* h, const MoePlan& plan, int64_t max_active, const void* const* w2, int64_t inter,
                  int64_t hidden, float* y, cudaStream_t stream, MoeMmaShape shape) {
  launch<false>(shape, h, false, plan, max_active, w2, nullptr, inter, hidden, 0.0f, y, stream);
}

}  // namespace strata::cuda
