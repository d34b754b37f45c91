#include "backend/cuda/moe_gemm.h"

#include <mma.h>

#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_element.cuh"
#include "core/error.h"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kBM = static_cast<int>(kMoeGemmTileTokens);  // tokens per tile
constexpr int kBN = 64;                                     // output channels per tile (per matrix)
constexpr int kBK = 64;                                     // k-slice per pipeline stage
constexpr int kStages = 3;
constexpr int kThreads = 128;  // 4 warps, 2 × 2 over the tile: 32 tokens × 32 channels each
constexpr int kLd = kBK + 8;   // bf16 elements per staged row (16 bytes of padding: rows start in other banks)
constexpr int kLd8 = kBK + 16;  // bytes per staged FP8 weight row

using AccFragment = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using TokenFragment = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
// Weight rows W[n][k] staged row-major are the col-major B operand B[k][n].
using WeightFragment = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;

template <bool kGateUp, bool kFp8>
struct Layout {
  static constexpr int kMats = kGateUp ? 2 : 1;
  static constexpr size_t kAStage = static_cast<size_t>(kBM) * kLd * sizeof(bf16);
  static constexpr size_t kBRow = kFp8 ? kLd8 : kLd * sizeof(bf16);  // bytes per staged weight row
  static constexpr size_t kBStage = static_cast<size_t>(kMats) * kBN * kBRow;
  static constexpr size_t kConverted = kFp8 ? static_cast<size_t>(kMats) * kBN * kLd * sizeof(bf16) : 0;
  static constexpr size_t kBytes = kStages * (kAStage + kBStage) + kConverted;
  // The epilogue reuses the stages: per warp one 16×16 fp32 tile per matrix.
  static_assert(4 * kMats * 256 * sizeof(float) <= kStages * kAStage, "epilogue tiles fit the A stages");
};

// 16 bytes global → shared without passing through registers; `bytes` 0 fills zeros (tokens past the tile's last).
__device__ inline void cp_async16(void* dst, const void* src, int bytes) {
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// One block: tile blockIdx.y of the plan (kBM pairs of one expert) × channels [blockIdx.x · kBN, + kBN). Channel
// tiles vary fastest across the grid, so the blocks in flight share their token rows and their expert's weights
// in L2. kGateUp: W1 and W3 side by side, meeting in the clamped SwiGLU (bf16 h); otherwise one matrix, fp32 out.
template <bool kGateUp, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    moe_gemm_kernel(const bf16* __restrict__ x, bool x_by_row, MoePlan plan, MoeTiles tiles, const void* const* wa,
                    const void* const* wb, const float* const* sa, const float* const* sb, int in, int out_width,
                    float limit, void* out) {
  using L = Layout<kGateUp, kFp8>;
  using W = std::conditional_t<kFp8, uint8_t, bf16>;
  constexpr int kMats = L::kMats;
  const int tile = blockIdx.y;
  if (tile >= *tiles.count) return;
  const int e = tiles.expert[tile], p0 = tiles.start[tile];
  const int nt = min(kBM, plan.expert_start[e + 1] - p0);
  const int n0 = blockIdx.x * kBN;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* a_stages = reinterpret_cast<bf16*>(smem);
  unsigned char* b_stages = smem + kStages * L::kAStage;
  bf16* converted = reinterpret_cast<bf16*>(smem + kStages * (L::kAStage + L::kBStage));

  const W* w[kMats];
  w[0] = static_cast<const W*>(wa[e]) + static_cast<int64_t>(n0) * in;
  if constexpr (kGateUp) w[kMats - 1] = static_cast<const W*>(wb[e]) + static_cast<int64_t>(n0) * in;

  // This thread's 16-byte pieces of a stage: token rows (the same rows every stage) and weight rows.
  constexpr int kAPieces = kBM * (kBK / 8) / kThreads;
  const bf16* a_src[kAPieces];
  int a_dst[kAPieces], a_bytes[kAPieces];
#pragma unroll
  for (int i = 0; i < kAPieces; ++i) {
    const int c = threadIdx.x + i * kThreads, t = c / (kBK / 8), v = c % (kBK / 8);
    a_bytes[i] = t < nt ? 16 : 0;
    const int64_t row = t < nt ? (x_by_row ? plan.pair_row[p0 + t] : p0 + t) : 0;
    a_src[i] = x + row * in + v * 8;
    a_dst[i] = t * kLd + v * 8;
  }
  constexpr int kBPiecesPerRow = static_cast<int>(kBK * sizeof(W) / 16);
  constexpr int kBPieces = kMats * kBN * kBPiecesPerRow / kThreads;

  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
    bf16* as = a_stages + stage * (kBM * kLd);
#pragma unroll
    for (int i = 0; i < kAPieces; ++i) cp_async16(as + a_dst[i], a_src[i] + k0, a_bytes[i]);
    unsigned char* bs = b_stages + stage * L::kBStage;
#pragma unroll
    for (int i = 0; i < kBPieces; ++i) {
      const int c = threadIdx.x + i * kThreads;
      const int row = c / kBPiecesPerRow, v = c % kBPiecesPerRow;  // row = matrix · kBN + channel
      const int mat = row / kBN, n = row % kBN;
      const auto* src = reinterpret_cast<const unsigned char*>(w[mat] + static_cast<int64_t>(n) * in + k0) + v * 16;
      cp_async16(bs + row * L::kBRow + v * 16, src, 16);
    }
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / 2, wn = warp % 2;
  AccFragment acc[kMats][2][2];
  AccFragment part[kFp8 ? kMats : 1][2][2];  // FP8: the current 128-column scale block's unscaled sums
#pragma unroll
  for (int m = 0; m < kMats; ++m)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::fill_fragment(acc[m][i][j], 0.0f);
        if constexpr (kFp8) wmma::fill_fragment(part[m][i][j], 0.0f);
      }

  const int slices = in / kBK;
  const int64_t scale_cols = (in + 127) / 128;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < slices) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < slices; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // slice kt has landed for every thread, and every warp is done with slice kt − 1
    const int stage = kt % kStages;
    const bf16* b;
    if constexpr (kFp8) {
      const unsigned char* bs = b_stages + stage * L::kBStage;
      for (int c = threadIdx.x; c < kMats * kBN * (kBK / 16); c += kThreads) {
        const int row = c / (kBK / 16), v = c % (kBK / 16);
        float f[16];
        fp8x16_to_float(*reinterpret_cast<const uint4*>(bs + row * L::kBRow + v * 16), f);
        __nv_bfloat162 pairs[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) pairs[q] = __floats2bfloat162_rn(f[2 * q], f[2 * q + 1]);
        uint4* dst = reinterpret_cast<uint4*>(converted + row * kLd + v * 16);
        dst[0] = *reinterpret_cast<const uint4*>(&pairs[0]);
        dst[1] = *reinterpret_cast<const uint4*>(&pairs[4]);
      }
      __syncthreads();
      b = converted;
    } else {
      b = reinterpret_cast<const bf16*>(b_stages + stage * L::kBStage);
    }
    // The stage freed by slice kt − 1 takes slice kt + kStages − 1 while this one multiplies.
    if (kt + kStages - 1 < slices) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();

    const bf16* as = a_stages + stage * (kBM * kLd);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      TokenFragment tokens[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(tokens[i], as + (wm * 32 + i * 16) * kLd + kk, kLd);
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          WeightFragment weights;
          wmma::load_matrix_sync(weights, b + (m * kBN + wn * 32 + j * 16) * kLd + kk, kLd);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            if constexpr (kFp8)
              wmma::mma_sync(part[m][i][j], tokens[i], weights, part[m][i][j]);
            else
              wmma::mma_sync(acc[m][i][j], tokens[i], weights, acc[m][i][j]);
          }
        }
    }
    if constexpr (kFp8) {
      const int k_end = (kt + 1) * kBK;
      if (k_end % 128 == 0 || kt + 1 == slices) {
        // A uniform scale multiplies every element alike, whatever the fragment's layout.
        const int64_t block = static_cast<int64_t>(n0 / 128) * scale_cols + (k_end - 1) / 128;
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          const float scale = (m == 0 ? sa : sb)[e][block];
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
#pragma unroll
              for (int q = 0; q < acc[m][i][j].num_elements; ++q) acc[m][i][j].x[q] += scale * part[m][i][j].x[q];
              wmma::fill_fragment(part[m][i][j], 0.0f);
            }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free for the epilogue

  // Epilogue through shared memory (a fragment's element layout is opaque): one 16×16 tile per matrix at a time.
  float* staged = reinterpret_cast<float*>(smem) + warp * kMats * 256;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int m = 0; m < kMats; ++m) wmma::store_matrix_sync(staged + m * 256, acc[m][i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int q = lane; q < 256; q += 32) {
        const int t = wm * 32 + i * 16 + q / 16;
        if (t >= nt) continue;
        const int64_t at = static_cast<int64_t>(p0 + t) * out_width + n0 + wn * 32 + j * 16 + q % 16;
        if constexpr (kGateUp) {
          const float g = fminf(staged[q], limit), u = fminf(fmaxf(staged[256 + q], -limit), limit);
          static_cast<bf16*>(out)[at] = __float2bfloat16(g / (1.0f + expf(-g)) * u);
        } else {
          static_cast<float*>(out)[at] = staged[q];
        }
      }
      __syncwarp();
    }
}

template <bool kGateUp, bool kFp8>
void launch(const bf16* x, bool x_by_row, const MoePlan& plan, const MoeTiles& tiles, int64_t max_tiles,
            const void* const* wa, const void* const* wb, const float* const* sa, const float* const* sb, int64_t in,
            int64_t out_width, float limit, void* out, cudaStream_t stream) {
  if (max_tiles == 0) return;
  using L = Layout<kGateUp, kFp8>;
  auto* kernel = moe_gemm_kernel<kGateUp, kFp8>;
  STRATA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kBytes)));
  const dim3 grid(static_cast<unsigned>(out_width / kBN), static_cast<unsigned>(max_tiles));
  kernel<<<grid, kThreads, L::kBytes, stream>>>(x, x_by_row, plan, tiles, wa, wb, sa, sb, static_cast<int>(in),
                                                static_cast<int>(out_width), limit, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool moe_gemm_supported(GemmType type, int64_t hidden, int64_t inter, int64_t max_tiles) {
  const bool widths = hidden % kBK == 0 && inter % kBK == 0 && hidden % kBN == 0 && inter % kBN == 0;
  return (type == GemmType::Bf16 || type == GemmType::Fp8) && widths && max_tiles <= 65535;
}

bool moe_gemm_pays(GemmType type, int64_t pairs, int64_t experts) {
  // strata_gpu_moe_bench on the H200, V4-Flash experts (bench/results/cuda_moe_kernels_h200.json): bf16 tiles tie
  // the SIMT kernels at batch 16 (0.44 pairs per expert) and win from there on (3.2 vs 4.1 ms at batch 64), and beat
  // moe_mma.h everywhere; FP8 tiles, which convert the weights in shared memory, lose to the SIMT kernels at batch
  // 64 (4.7 vs 4.2 ms) and win from 128 (5.3 vs 7.7 ms; 2 pairs per expert ≈ batch 73).
  return type == GemmType::Fp8 ? pairs >= 2 * experts : 2 * pairs >= experts;
}

void moe_gate_up_gemm(GemmType type, const bf16* x, const MoePlan& plan, const MoeTiles& tiles, int64_t max_tiles,
                      const void* const* w1, const void* const* w3, const float* const* s1, const float* const* s3,
                      int64_t hidden, int64_t inter, float limit, bf16* h, cudaStream_t stream) {
  if (type == GemmType::Fp8)
    launch<true, true>(x, true, plan, tiles, max_tiles, w1, w3, s1, s3, hidden, inter, limit, h, stream);
  else if (type == GemmType::Bf16)
    launch<true, false>(x, true, plan, tiles, max_tiles, w1, w3, nullptr, nullptr, hidden, inter, limit, h, stream);
  else
    fail("moe_gemm: weights must be bf16 or fp8");
}

void moe_down_gemm(GemmType type, const bf16* h, const MoePlan& plan, const MoeTiles& tiles, int64_t max_tiles,
                   const void* const* w2, const float* const* s2, int64_t inter, int64_t hidden, float* y,
                   cudaStream_t stream) {
  if (type == GemmType::Fp8)
    launch<false, true>(h, false, plan, tiles, max_tiles, w2, nullptr, s2, nullptr, inter, hidden, 0.0f, y, stream);
  else if (type == GemmType::Bf16)
    launch<false, false>(h, false, plan, tiles, max_tiles, w2, nullptr, nullptr, nullptr, inter, hidden, 0.0f, y,
                         stream);
  else
    fail("moe_gemm: weights must be bf16 or fp8");
}

}  // namespace strata::cuda
