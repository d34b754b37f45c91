// Products with a handful of rows (decode): y[t, n] = x[t, :] · w[n, :] for t < m ≤ kGemvMaxRows. Such a product
// is bound by reading w once, so the kernel is built to keep the memory system busy from the first cycle to the
// last: a persistent grid (every SM filled once, as many blocks as fit) whose warps walk tiles of R weight rows,
// each lane holding kInFlight 16-byte weight vectors (of the tile's R rows) in flight before it multiplies them
// with the few activation rows, read from cache once per tile column and shared by the R rows. No block ever
// drains and refills the SM, and the grid ends in one tail of at most one tile per warp.
//
// The summation order of y[t, n] depends on k alone: lane L (of 32) owns the vectors at columns (32·j + L)·V
// (V = 8 bf16 or 4 fp32 per 16-byte vector) and adds their products one by one in order of j (fmaf, element order
// within a vector); the 32 lanes' sums then meet in an xor butterfly (offsets 16, 8, 4, 2, 1), after which every
// lane holds the same bits. R, kInFlight, the grid, m (M ≥ m) and the entry point (gemv, batched or not; gemv_many)
// only decide who computes which row when — so every row's result is batch invariant and gemv_many matches gemv.
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_properties.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/gemv.h"

namespace strata::cuda {

namespace {

constexpr int kBlockWarps = 4;  // small blocks: a narrow matrix's few tiles still spread over every SM
// 16-byte weight vectors a lane requests before it multiplies (R rows × kInFlight / R each). fp32 (the reference
// precision) keeps 8, and 4 from four activation rows up: with more, ptxas hoists the activation loads past the register
// budget and spills.
template <typename T, int M>
constexpr int kInFlight = sizeof(T) == 2 ? 16 : M < 4 ? 8 : 4;

// The weight rows of one tile and where their outputs go: rows row .. row + R - 1 of a matrix of n rows.
template <typename T>
struct Tile {
  const T* x;
  int64_t ldx;
  const T* w;  // row `row` of the matrix
  int64_t ldw;
  float* y;  // column `row` of the output
  int64_t ldy;
  int64_t rows;  // how many of the R rows exist (1..R)
};

// gemv's products: `batch` matrices at element strides, tiles numbered product-major.
template <typename T, int R>
struct StridedProducts {
  const T* x;
  int64_t ldx, stride_x;
  const T* w;
  int64_t ldw, stride_w;
  float* y;
  int64_t ldy, stride_y, n, batch;

  int64_t tiles() const { return (n + R - 1) / R * batch; }
  __device__ Tile<T> tile(int64_t i) const {
    const int64_t per_product = (n + R - 1) / R, g = i / per_product, row = (i - g * per_product) * R;
    return {x + g * stride_x, ldx, w + g * stride_w + row * ldw, ldw, y + g * stride_y + row, ldy,
            n - row < R ? n - row : R};
  }
};

// gemv_many's products: up to kGemvMaxTargets matrices on one input, their tiles concatenated in target order.
template <typename T, int R>
struct SharedInputProducts {
  const T* x;
  int64_t k;
  int count;
  GemvTarget targets[kGemvMaxTargets];
  int64_t first_tile[kGemvMaxTargets + 1];

  int64_t tiles() const { return first_tile[count]; }
  __device__ Tile<T> tile(int64_t i) const {
    int j = 0;
    while (j + 1 < count && i >= first_tile[j + 1]) ++j;
    const GemvTarget& t = targets[j];
    const int64_t row = (i - first_tile[j]) * R;
    return {x, k, static_cast<const T*>(t.w) + row * k, k, t.y + row, t.n, t.n - row < R ? t.n - row : R};
  }
};

// A weight vector: read once, so it bypasses L1 (where the activations stay) and takes the read-only path.
__device__ inline uint4 load_streaming(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// At least three blocks (twelve warps) an SM: registers for the loads in flight, not a fourth block (fp32 with
// eight activation rows: two, else ptxas spills).
template <typename T, int M, int R, typename Products>
__global__ void __launch_bounds__(kBlockWarps * 32, sizeof(T) == 4 && M == 8 ? 2 : 3)
    gemv_rows_kernel(const Products products, int m, int64_t k, int64_t tiles) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  constexpr int kLoads = kInFlight<T, M> / R;  // per row of the tile
  constexpr int64_t kRound = 32 * kVec;  // columns one round of the warp's vectors covers
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kBlockWarps;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kBlockWarps + threadIdx.x / 32; i < tiles; i += warps) {
    const Tile<T> tile = products.tile(i);
    // A tile's missing rows (the matrix's last tile) read its last row again: no divergence, results dropped.
    const T* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = tile.w + (r < tile.rows ? r : tile.rows - 1) * tile.ldw;
    float acc[R][M];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t) acc[r][t] = 0.0f;
    // One round: the lane's kLoads vectors of each of the R rows requested, then multiplied column by column with the
    // M activation vectors of that column (all requested before the first is used; rows past m repeat row m - 1 and
    // their sums are dropped). kGuard: the last round, whose columns may run past k (lanes skip those vectors).
    auto round = [&](int64_t c0, auto guard) {
      constexpr bool kGuard = decltype(guard)::value;
      uint4 wv[R][kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        int64_t c = c0 + u * kRound;
        if constexpr (kGuard) c = c < k ? c : k - kVec;
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r][u] = load_streaming(wr[r] + c);
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        int64_t c = c0 + u * kRound;
        if constexpr (kGuard) {
          if (c >= k) break;
        }
        uint4 xv[M];
#pragma unroll
        for (int t = 0; t < M; ++t) xv[t] = __ldg(reinterpret_cast<const uint4*>(tile.x + (t < m ? t : m - 1) * tile.ldx + c));
#pragma unroll
        for (int t = 0; t < M; ++t) {
          const T* xt = reinterpret_cast<const T*>(&xv[t]);
          float xf[kVec];
#pragma unroll
          for (int v = 0; v < kVec; ++v) xf[v] = to_float(xt[v]);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const T* wt = reinterpret_cast<const T*>(&wv[r][u]);
#pragma unroll
            for (int v = 0; v < kVec; ++v) acc[r][t] = fmaf(to_float(wt[v]), xf[v], acc[r][t]);
          }
        }
      }
    };
    const int64_t lane_offset = static_cast<int64_t>(lane) * kVec, full = k / (kRound * kLoads) * (kRound * kLoads);
#pragma unroll 1
    for (int64_t c0 = 0; c0 < full; c0 += kRound * kLoads) round(c0 + lane_offset, std::false_type{});
    if (full < k) round(full + lane_offset, std::true_type{});
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], o);
    // Every lane holds every sum: lane r·M + t stores y[t, row + r].
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < M; ++t)
        if (lane == r * M + t && t < m && r < tile.rows) tile.y[t * tile.ldy + r] = acc[r][t];
  }
}

// Blocks of this kernel that fit on one SM at once (registers decide), asked once per instantiation.
template <typename Kernel>
int resident_blocks(Kernel kernel) {
  int blocks = 0;
  STRATA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlockWarps * 32, 0));
  return std::max(blocks, 1);
}

template <typename T, int M, int R, typename Products>
void launch_rows(const Products& products, int64_t m, int64_t k, int64_t tiles, cudaStream_t stream) {
  static const int per_sm = resident_blocks(gemv_rows_kernel<T, M, R, Products>);
  const int64_t blocks = std::min<int64_t>((tiles + kBlockWarps - 1) / kBlockWarps,
                                           static_cast<int64_t>(per_sm) * multiprocessors());
  gemv_rows_kernel<T, M, R, Products><<<static_cast<unsigned>(blocks), kBlockWarps * 32, 0, stream>>>(
      products, static_cast<int>(m), k, tiles);
  STRATA_CUDA_CHECK_LAUNCH();
}

// Rows per tile: as many as a lane's kInFlight vectors cover when a row has fewer (k of 1024 bf16: 4 vectors a lane
// a row, so 4 rows), two from 4 activation rows up (each activation vector read from L1 then serves two weight
// vectors), but never so many that the tiles leave warps of the GPU idle (a narrow matrix: one row a tile).
template <typename T>
int rows_per_tile(int64_t rows, int64_t m, int64_t k) {
  const int64_t round = 32 * (16 / static_cast<int64_t>(sizeof(T))), vectors = (k + round - 1) / round;
  const int64_t warps = 2 * kBlockWarps * static_cast<int64_t>(multiprocessors());
  const int64_t in_flight = m < 4 ? kInFlight<T, 1> : kInFlight<T, 8>;
  int r = vectors <= in_flight / 4 && m <= 4 ? 4 : vectors <= in_flight / 2 || m >= 4 ? 2 : 1;
  while (r > 1 && (rows + r - 1) / r < warps) r /= 2;
  return r;
}

// Picks M (the rows the kernel is compiled for, ≥ m) and R, then launches over `products(R)`.
template <typename T, template <typename, int> class Products, typename Make>
void dispatch_rows(const Make& make, int64_t rows, int64_t m, int64_t k, cudaStream_t stream) {
  const int r = rows_per_tile<T>(rows, m, k);
  auto with_m = [&](auto rows_tag) {
    constexpr int R = decltype(rows_tag)::value;
    const Products<T, R> products = make(std::integral_constant<int, R>{});
    const int64_t tiles = products.tiles();
    if (m <= 1)
      launch_rows<T, 1, R>(products, m, k, tiles, stream);
    else if (m <= 2)
      launch_rows<T, 2, R>(products, m, k, tiles, stream);
    else if (m <= 4)
      launch_rows<T, 4, R>(products, m, k, tiles, stream);
    else if constexpr (R <= 2)  // eight activation rows take four weight rows' registers: rows_per_tile says 2
      launch_rows<T, 8, R>(products, m, k, tiles, stream);
  };
  if (r == 4)
    with_m(std::integral_constant<int, 4>{});
  else if (r == 2)
    with_m(std::integral_constant<int, 2>{});
  else
    with_m(std::integral_constant<int, 1>{});
}

// The previous kernel, kept for tests/gpu/gemv_bench.cpp's comparison (gemv_legacy): one block per eight rows
// (k in S slices when the grid would not fill the GPU), one round of loads per warp, then the block exits.
namespace legacy {

constexpr int kWarps = 8;

template <typename T, int M, int S>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_reference_kernel(const T* x, int64_t ldx, int64_t stride_x, const T* w, int64_t ldw, int64_t stride_w, float* y,
                int64_t ldy, int64_t stride_y, int m, int64_t n, int64_t k) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  constexpr int kUnroll = M <= 2 ? 8 : 4;
  constexpr int kRowsPerBlock = kWarps / S;
  __shared__ float partial[kWarps][M];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, part = warp % S;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp / S;
  const bool active = row < n;
  const int64_t g = blockIdx.y;
  x += g * stride_x;
  y += g * stride_y;
  // This warp's slice of k: whole rounds of the lanes' vectors.
  const int64_t round = 32 * kVec, span = (k + S * round - 1) / (S * round) * round;
  const int64_t k0 = part * span, k1 = min(k, k0 + span);
  const T* wr = w + g * stride_w + row * ldw;
  float acc[M] = {};
  if (active) {
    for (int64_t c0 = k0 + static_cast<int64_t>(lane) * kVec; c0 < k1; c0 += round * kUnroll) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + static_cast<int64_t>(u) * round;
        if (c < k1) wv[u] = *reinterpret_cast<const uint4*>(wr + c);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + static_cast<int64_t>(u) * round;
        if (c >= k1) break;
        const T* wt = reinterpret_cast<const T*>(&wv[u]);
#pragma unroll
        for (int t = 0; t < M; ++t) {
          if (t >= m) break;
          const uint4 xv = *reinterpret_cast<const uint4*>(x + t * ldx + c);
          const T* xt = reinterpret_cast<const T*>(&xv);
#pragma unroll
          for (int v = 0; v < kVec; ++v) acc[t] += to_float(wt[v]) * to_float(xt[v]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < M; ++t)
    for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
  if constexpr (S == 1) {
#pragma unroll
    for (int t = 0; t < M; ++t)
      if (active && lane == 0 && t < m) y[t * ldy + row] = acc[t];
  } else {
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < M; ++t) partial[warp][t] = acc[t];
    }
    __syncthreads();
    if (active && part == 0 && lane < m) {
      float total = 0.0f;
#pragma unroll
      for (int p = 0; p < S; ++p) total += partial[warp + p][lane];
      y[lane * ldy + row] = total;
    }
  }
}

template <typename T, int M, int S>
void launch_split(const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w, float* y,
                  int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarps / S;
  const dim3 grid(static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(batch));
  gemv_reference_kernel<T, M, S><<<grid, kWarps * 32, 0, stream>>>(static_cast<const T*>(x), ldx, stride_x,
                                                         static_cast<const T*>(w), ldw, stride_w, y, ldy, stride_y,
                                                         static_cast<int>(m), n, k);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T, int M>
void launch(const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w, float* y,
            int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream) {
  // The fewest slices whose grid fills every SM with eight blocks (and no slice shorter than two rounds of vectors):
  // a product that fits in one wave then has every row's loads in flight at once instead of in rounds.
  const int64_t target = 8 * static_cast<int64_t>(multiprocessors()), vec = 16 / static_cast<int64_t>(sizeof(T));
  int split = 1;
  while (split < kWarps && (n + kWarps / split - 1) / (kWarps / split) * batch < target &&
         k / (2 * split) >= 2 * 32 * vec)
    split *= 2;
  switch (split) {
    case 1: return launch_split<T, M, 1>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
    case 2: return launch_split<T, M, 2>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
    case 4: return launch_split<T, M, 4>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
    default: return launch_split<T, M, 8>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
  }
}

template <typename T>
void dispatch(const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w, float* y,
              int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream) {
  if (m <= 1)
    launch<T, 1>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
  else if (m <= 2)
    launch<T, 2>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
  else if (m <= 4)
    launch<T, 4>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
  else
    launch<T, 8>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
}

}  // namespace legacy

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_applies(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw,
                  int64_t stride_w, int64_t m, int64_t k) {
  const auto vec = static_cast<int64_t>(16 / gemm_type_size(type));
  return m >= 1 && m <= kGemvMaxRows && k % vec == 0 && ldx % vec == 0 && ldw % vec == 0 && stride_x % vec == 0 &&
         stride_w % vec == 0 && aligned16(x) && aligned16(w);
}

void gemv(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w,
          float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch,
          cudaStream_t stream) {
  if (m == 0 || n == 0 || batch == 0) return;
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    auto make = [&](auto rows_tag) {
      constexpr int R = decltype(rows_tag)::value;
      return StridedProducts<T, R>{static_cast<const T*>(x), ldx, stride_x, static_cast<const T*>(w), ldw, stride_w,
                                   y, ldy, stride_y, n, batch};
    };
    dispatch_rows<T, StridedProducts>(make, n * batch, m, k, stream);
  };
  if (type == GemmType::Bf16)
    run(__nv_bfloat16{});
  else
    run(float{});
}

bool gemv_many_applies(GemmType type, const void* x, int64_t m, int64_t k, const GemvTarget* targets, int count) {
  if (count < 1 || count > kGemvMaxTargets) return false;
  for (int j = 0; j < count; ++j)
    if (targets[j].n < 0 || !gemv_applies(type, x, k, 0, targets[j].w, k, 0, m, k)) return false;
  return true;
}

void gemv_many(GemmType type, const void* x, int64_t m, int64_t k, const GemvTarget* targets, int count,
               cudaStream_t stream) {
  if (m == 0 || count == 0) return;
  if (count > kGemvMaxTargets) fail("gemv_many: at most ", kGemvMaxTargets, " targets, found ", count);
  int64_t rows = 0;
  for (int j = 0; j < count; ++j) rows += targets[j].n;
  if (rows == 0) return;
  auto run = [&](auto type_tag) {
    using T = decltype(type_tag);
    auto make = [&](auto rows_tag) {
      constexpr int R = decltype(rows_tag)::value;
      SharedInputProducts<T, R> p{};
      p.x = static_cast<const T*>(x);
      p.k = k;
      p.count = count;
      for (int j = 0; j < count; ++j) {
        p.targets[j] = targets[j];
        p.first_tile[j + 1] = p.first_tile[j] + (targets[j].n + R - 1) / R;
      }
      return p;
    };
    dispatch_rows<T, SharedInputProducts>(make, rows, m, k, stream);
  };
  if (type == GemmType::Bf16)
    run(__nv_bfloat16{});
  else
    run(float{});
}

void gemv_legacy(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw,
                 int64_t stride_w, float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k,
                 int64_t batch, cudaStream_t stream) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (type == GemmType::Bf16)
    legacy::dispatch<__nv_bfloat16>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
  else
    legacy::dispatch<float>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
}

}  // namespace strata::cuda
