#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/moe.h"

namespace strata::cuda {

namespace {

constexpr int kPlanThreads = 1024;
constexpr int kThreads = 256;        // 8 warps per block of the grouped kernels
constexpr int kRowsPerBlock = 32;    // output channels per block: 4 per warp
constexpr size_t kVectorBytes = 16;  // weights and operands are read as 16-byte vectors

// `experts` counts the shared expert when there is one; `k` the slots per row (routed, plus the shared one).
__global__ void moe_plan_kernel(const int32_t* ids, const float* weights, int rows, int k, int experts,
                                bool shared_expert, MoePlan plan) {
  extern __shared__ int32_t shared[];
  int32_t* count = shared;             // [experts]
  int32_t* start = count + experts;    // [experts + 1]
  int32_t* id = start + experts + 1;   // [pairs]
  const int pairs = rows * k, routed_k = shared_expert ? k - 1 : k;
  for (int i = threadIdx.x; i < experts; i += blockDim.x) count[i] = 0;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int r = i / k, j = i % k;
    id[i] = j < routed_k ? ids[r * routed_k + j] : experts - 1;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) atomicAdd(&count[id[i]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0, active = 0;
    for (int e = 0; e < experts; ++e) {
      start[e] = at;
      if (count[e]) plan.active[active++] = e;
      at += count[e];
    }
    start[experts] = at;
    *plan.n_active = active;
  }
  __syncthreads();
  for (int i = threadIdx.x; i <= experts; i += blockDim.x) plan.expert_start[i] = start[i];
  // Pair p = (row r, choice j) of expert e: its place among e's pairs is how many earlier pairs chose e (rows
  // ascending), and its place in row r is how many of r's choices sort before it by (expert, choice).
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int r = p / k, j = p % k, e = id[p];
    int rank = 0;
    for (int q = 0; q < p; ++q) rank += id[q] == e;
    const int at = start[e] + rank;
    plan.pair_row[at] = r;
    int order = 0;
    for (int jj = 0; jj < k; ++jj) {
      const int other = id[r * k + jj];
      order += other < e || (other == e && jj < j);
    }
    plan.slot[r * k + order] = at;
    plan.slot_weight[r * k + order] = j < routed_k ? weights[r * routed_k + j] : 1.0f;
  }
}


// The chunked plan (moe_plan_tiled): each block of the count and place kernels owns kPlanChunkRows rows.
constexpr int kPlanChunkRows = 128;
constexpr int kChunkThreads = 256;

__device__ inline int pair_expert(const int32_t* ids, int r, int j, int routed_k, int experts) {
  return j < routed_k ? ids[r * routed_k + j] : experts - 1;
}

// count[chunk][e]: the chunk's pairs of expert e.
__global__ void moe_count_kernel(const int32_t* ids, int rows, int k, int experts, bool shared_expert,
                                 int32_t* count) {
  extern __shared__ int32_t local[];  // [experts]
  const int routed_k = shared_expert ? k - 1 : k;
  for (int i = threadIdx.x; i < experts; i += blockDim.x) local[i] = 0;
  __syncthreads();
  const int r0 = blockIdx.x * kPlanChunkRows, r1 = min(rows, r0 + kPlanChunkRows);
  for (int i = threadIdx.x; i < (r1 - r0) * k; i += blockDim.x)
    atomicAdd(&local[pair_expert(ids, r0 + i / k, i % k, routed_k, experts)], 1);
  __syncthreads();
  for (int i = threadIdx.x; i < experts; i += blockDim.x) count[blockIdx.x * experts + i] = local[i];
}

// One block: count[chunk][e] becomes the pairs of e in earlier chunks; expert starts, the active list and the
// tiles follow from the totals.
__global__ void moe_scan_kernel(int32_t* count, int chunks, int experts, MoePlan plan, MoeTiles tiles,
                                int tile_tokens) {
  extern __shared__ int32_t total[];  // [experts]
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int at = 0;
    for (int c = 0; c < chunks; ++c) {
      const int n = count[c * experts + e];
      count[c * experts + e] = at;
      at += n;
    }
    total[e] = at;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int at = 0, active = 0, n_tiles = 0;
  for (int e = 0; e < experts; ++e) {
    plan.expert_start[e] = at;
    if (total[e]) plan.active[active++] = e;
    for (int p = at; p < at + total[e]; p += tile_tokens) {
      tiles.expert[n_tiles] = e;
      tiles.start[n_tiles++] = p;
    }
    at += total[e];
  }
  plan.expert_start[experts] = at;
  *plan.n_active = active;
  *tiles.count = n_tiles;
}

// Each pair's place: its expert's start, the expert's pairs in earlier chunks, then earlier pairs of the chunk with
// the same expert (rows ascending, as moe_plan_kernel orders them); its slot in the row as there.
__global__ void moe_place_kernel(const int32_t* ids, const float* weights, int rows, int k, int experts,
                                 bool shared_expert, const int32_t* before, MoePlan plan) {
  extern __shared__ int32_t id[];  // [kPlanChunkRows * k]
  const int routed_k = shared_expert ? k - 1 : k;
  const int r0 = blockIdx.x * kPlanChunkRows, r1 = min(rows, r0 + kPlanChunkRows), pairs = (r1 - r0) * k;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) id[i] = pair_expert(ids, r0 + i / k, i % k, routed_k, experts);
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int r = p / k, j = p % k, e = id[p];
    int rank = 0;
    for (int q = 0; q < p; ++q) rank += id[q] == e;
    const int at = plan.expert_start[e] + before[blockIdx.x * experts + e] + rank;
    plan.pair_row[at] = r0 + r;
    int order = 0;
    for (int jj = 0; jj < k; ++jj) {
      const int other = id[r * k + jj];
      order += other < e || (other == e && jj < j);
    }
    const int64_t row_slots = static_cast<int64_t>(r0 + r) * k;
    plan.slot[row_slots + order] = at;
    plan.slot_weight[row_slots + order] = j < routed_k ? weights[(r0 + r) * routed_k + j] : 1.0f;
  }
}


// Tokens of one expert staged in shared memory at a time: 32 KiB of operands at hidden 4096.
template <typename T>
__host__ __device__ constexpr int tokens_per_tile() {
  return sizeof(T) == 2 ? 4 : 2;
}

// One block = one active expert × kRowsPerBlock output channels; each warp owns channels and streams their weight
// rows once per tile of tokens (a 16-byte vector per lane per step), the tile's operands sitting in shared memory.
// kGateUp: two matrices (W1, W3) whose outputs meet in the SwiGLU, written as T; otherwise one matrix, fp32 out.
// Weights W are T itself, or e4m3 codes (uint8_t) with 128×128 block scales (sa/sb: each expert's scale matrix):
// then a 16-byte vector holds 16 weights, all in one 128-column block, dequantized in registers (weight-only FP8:
// the operands stay T = bf16).
template <typename T, typename W, bool kGateUp>
__global__ void moe_grouped_kernel(const T* x, bool x_by_row, MoePlan plan, const W* const* wa, const W* const* wb,
                                   const float* const* sa, const float* const* sb, int64_t in, int64_t out_width,
                                   float limit, void* out) {
  constexpr bool kFp8 = std::is_same_v<W, uint8_t>;
  constexpr int kTile = tokens_per_tile<T>();
  constexpr int kVec = static_cast<int>(kVectorBytes / sizeof(W));
  constexpr int kOperandLoads = static_cast<int>(kVec * sizeof(T) / kVectorBytes);
  const int slot = blockIdx.x;
  if (slot >= *plan.n_active) return;
  const int e = plan.active[slot];
  const int p0 = plan.expert_start[e], p1 = plan.expert_start[e + 1];
  extern __shared__ __align__(16) unsigned char staged_bytes[];
  T* staged = reinterpret_cast<T*>(staged_bytes);  // [kTile, in]
  const W* a = wa[e];
  const W* b = kGateUp ? wb[e] : nullptr;
  const int64_t scale_cols = (in + 127) / 128;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int64_t n_begin = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
  const int64_t n_end = min(n_begin + kRowsPerBlock, out_width);
  for (int pt = p0; pt < p1; pt += kTile) {
    const int nt = min(kTile, p1 - pt);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < static_cast<int64_t>(nt) * in; i += blockDim.x) {
      const int t = static_cast<int>(i / in);
      const int64_t row = x_by_row ? plan.pair_row[pt + t] : pt + t;
      staged[i] = x[row * in + i % in];
    }
    __syncthreads();
    for (int64_t n = n_begin + warp; n < n_end; n += warps) {
      float acc_a[kTile] = {}, acc_b[kTile] = {};
      const W* ra = a + n * in;
      const W* rb = kGateUp ? b + n * in : nullptr;
      const float* scale_a = kFp8 ? sa[e] + (n / 128) * scale_cols : nullptr;
      const float* scale_b = kFp8 && kGateUp ? sb[e] + (n / 128) * scale_cols : nullptr;
      // kUnroll weight vectors per matrix in flight per lane: the loop is bound by how many bytes are in flight
      // (4 KiB per warp, as the GEMV that streams the vocabulary head at the copy bandwidth).
      constexpr int kUnroll = kGateUp ? 4 : 8;
      for (int64_t c0 = static_cast<int64_t>(lane) * kVec; c0 < in; c0 += 32 * kVec * kUnroll) {
        uint4 va[kUnroll], vb[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + static_cast<int64_t>(u) * 32 * kVec;
          if (c < in) {
            va[u] = *reinterpret_cast<const uint4*>(ra + c);
            if constexpr (kGateUp) vb[u] = *reinterpret_cast<const uint4*>(rb + c);
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + static_cast<int64_t>(u) * 32 * kVec;
          if (c >= in) break;
          float wa_f[kVec], wb_f[kVec];
          float s_a = 1.0f, s_b = 1.0f;
          if constexpr (kFp8) {
            fp8x16_to_float(va[u], wa_f);
            s_a = scale_a[c / 128];
            if constexpr (kGateUp) {
              fp8x16_to_float(vb[u], wb_f);
              s_b = scale_b[c / 128];
            }
          } else {
            const W* wa_v = reinterpret_cast<const W*>(&va[u]);
            const W* wb_v = reinterpret_cast<const W*>(&vb[u]);
#pragma unroll
            for (int v = 0; v < kVec; ++v) {
              wa_f[v] = to_float(wa_v[v]);
              if constexpr (kGateUp) wb_f[v] = to_float(wb_v[v]);
            }
          }
#pragma unroll
          for (int t = 0; t < kTile; ++t) {
            if (t >= nt) break;
            T xv[kVec];
#pragma unroll
            for (int l = 0; l < kOperandLoads; ++l)
              reinterpret_cast<uint4*>(xv)[l] = reinterpret_cast<const uint4*>(staged + t * in + c)[l];
            if constexpr (kFp8) {
              // A vector's partial sum, then its block's scale.
              float part_a = 0.0f, part_b = 0.0f;
#pragma unroll
              for (int v = 0; v < kVec; ++v) {
                const float xf = to_float(xv[v]);
                part_a += wa_f[v] * xf;
                if constexpr (kGateUp) part_b += wb_f[v] * xf;
              }
              acc_a[t] += s_a * part_a;
              if constexpr (kGateUp) acc_b[t] += s_b * part_b;
            } else {
#pragma unroll
              for (int v = 0; v < kVec; ++v) {
                const float xf = to_float(xv[v]);
                acc_a[t] += wa_f[v] * xf;
                if constexpr (kGateUp) acc_b[t] += wb_f[v] * xf;
              }
            }
          }
        }
      }
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        for (int o = 16; o > 0; o >>= 1) {
          acc_a[t] += __shfl_xor_sync(0xffffffffu, acc_a[t], o);
          if constexpr (kGateUp) acc_b[t] += __shfl_xor_sync(0xffffffffu, acc_b[t], o);
        }
      }
      if (lane == 0) {
        for (int t = 0; t < nt; ++t) {
          const int64_t at = static_cast<int64_t>(pt + t) * out_width + n;
          if constexpr (kGateUp) {
            const float g = fminf(acc_a[t], limit), u = fminf(fmaxf(acc_b[t], -limit), limit);
            static_cast<T*>(out)[at] = from_float<T>(g / (1.0f + expf(-g)) * u);
          } else {
            static_cast<float*>(out)[at] = acc_a[t];
          }
        }
      }
    }
  }
}

template <typename T, typename W, bool kGateUp>
void launch_grouped(const void* x, bool x_by_row, const MoePlan& plan, int64_t max_active, const void* const* wa,
                    const void* const* wb, const float* const* sa, const float* const* sb, int64_t in,
                    int64_t out_width, float limit, void* out, cudaStream_t stream) {
  if (max_active == 0) return;
  const size_t shared = static_cast<size_t>(tokens_per_tile<T>() * in) * sizeof(T);
  if (shared > 48u * 1024u)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(moe_grouped_kernel<T, W, kGateUp>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  const dim3 grid(static_cast<unsigned>(max_active), static_cast<unsigned>((out_width + kRowsPerBlock - 1) / kRowsPerBlock));
  moe_grouped_kernel<T, W, kGateUp><<<grid, kThreads, shared, stream>>>(
      static_cast<const T*>(x), x_by_row, plan, reinterpret_cast<const W* const*>(wa),
      reinterpret_cast<const W* const*>(wb), sa, sb, in, out_width, limit, out);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void moe_plan(const int32_t* ids, const float* weights, int64_t rows, int64_t k, int64_t experts, bool shared_expert,
              const MoePlan& plan, cudaStream_t stream) {
  if (shared_expert) {
    experts += 1;
    k += 1;
  }
  const int64_t pairs = rows * k;
  if (pairs == 0) return;
  const size_t shared = static_cast<size_t>(2 * experts + 1 + pairs) * sizeof(int32_t);
  if (shared > 48u * 1024u)
    STRATA_CUDA_CHECK(
        cudaFuncSetAttribute(moe_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  moe_plan_kernel<<<1, kPlanThreads, shared, stream>>>(ids, weights, static_cast<int>(rows), static_cast<int>(k),
                                                       static_cast<int>(experts), shared_expert, plan);
  STRATA_CUDA_CHECK_LAUNCH();
}

int64_t moe_max_tiles(int64_t pairs, int64_t experts, int64_t tile_tokens) {
  return pairs / tile_tokens + std::min(pairs, experts);
}

int64_t moe_plan_work_ints(int64_t rows, int64_t experts) {
  return (rows + kPlanChunkRows - 1) / kPlanChunkRows * (experts + 1);
}

void moe_plan_tiled(const int32_t* ids, const float* weights, int64_t rows, int64_t k, int64_t experts,
                    bool shared_expert, const MoePlan& plan, const MoeTiles& tiles, int64_t tile_tokens, int32_t* work,
                    cudaStream_t stream) {
  if (shared_expert) {
    experts += 1;
    k += 1;
  }
  if (rows * k == 0) return;
  const auto chunks = static_cast<unsigned>((rows + kPlanChunkRows - 1) / kPlanChunkRows);
  const size_t per_expert = static_cast<size_t>(experts) * sizeof(int32_t);
  moe_count_kernel<<<chunks, kChunkThreads, per_expert, stream>>>(ids, static_cast<int>(rows), static_cast<int>(k),
                                                                  static_cast<int>(experts), shared_expert, work);
  STRATA_CUDA_CHECK_LAUNCH();
  moe_scan_kernel<<<1, kPlanThreads, per_expert, stream>>>(work, static_cast<int>(chunks), static_cast<int>(experts),
                                                           plan, tiles, static_cast<int>(tile_tokens));
  STRATA_CUDA_CHECK_LAUNCH();
  const size_t chunk_ids = static_cast<size_t>(kPlanChunkRows * k) * sizeof(int32_t);
  moe_place_kernel<<<chunks, kChunkThreads, chunk_ids, stream>>>(ids, weights, static_cast<int>(rows),
                                                                 static_cast<int>(k), static_cast<int>(experts),
                                                                 shared_expert, work, plan);
  STRATA_CUDA_CHECK_LAUNCH();
}

bool moe_grouped_supported(GemmType type, int64_t hidden, int64_t inter) {
  const auto vec = static_cast<int64_t>(kVectorBytes / gemm_type_size(type));
  return hidden % vec == 0 && inter % vec == 0;
}

void moe_gate_up(GemmType type, const void* x, const MoePlan& plan, int64_t max_active, const void* const* w1,
                 const void* const* w3, const float* const* s1, const float* const* s3, int64_t hidden, int64_t inter,
                 float limit, void* h, cudaStream_t stream) {
  if (type == GemmType::Fp8)
    launch_grouped<__nv_bfloat16, uint8_t, true>(x, true, plan, max_active, w1, w3, s1, s3, hidden, inter, limit, h,
                                                 stream);
  else if (type == GemmType::Bf16)
    launch_grouped<__nv_bfloat16, __nv_bfloat16, true>(x, true, plan, max_active, w1, w3, nullptr, nullptr, hidden,
                                                       inter, limit, h, stream);
  else
    launch_grouped<float, float, true>(x, true, plan, max_active, w1, w3, nullptr, nullptr, hidden, inter, limit, h,
                                       stream);
}

void moe_down(GemmType type, const void* h, const MoePlan& plan, int64_t max_active, const void* const* w2,
              const float* const* s2, int64_t inter, int64_t hidden, float* y, cudaStream_t stream) {
  if (type == GemmType::Fp8)
    launch_grouped<__nv_bfloat16, uint8_t, false>(h, false, plan, max_active, w2, nullptr, s2, nullptr, inter, hidden,
                                                  0.0f, y, stream);
  else if (type == GemmType::Bf16)
    launch_grouped<__nv_bfloat16, __nv_bfloat16, false>(h, false, plan, max_active, w2, nullptr, nullptr, nullptr,
                                                        inter, hidden, 0.0f, y, stream);
  else
    launch_grouped<float, float, false>(h, false, plan, max_active, w2, nullptr, nullptr, nullptr, inter, hidden, 0.0f,
                                        y, stream);
}

}  // namespace strata::cuda
