// The fixed-order tensor-core products of gemm_fixed_order.h. Both kernels build every output element from the same
// sequence of operations — per 128-column chunk a chain of m16n16k16 wmma steps from zero, then one fold into the
// total (an add, or an fma with the FP8 block scale), chunks in order — so an element's bits depend on its row's
// and column's inputs and on k, never on the kernel, the tile it fell in, m, n or the grid. The tensor cores
// compute each accumulator element from its own row and column only (tests/gpu/ops_check.cpp checks rows against
// the same rows in other batches as well as the two kernels against each other).
//
// FewRows (decode-sized steps): one block per 16 output channels × 16 rows; its warps take a chunk each, staged
// through shared memory, and the block's first warp folds the chunks' partial sums in chunk order. Many warps per
// weight tile keep the loads in flight that a few rows need to read the weights at bandwidth.
// ManyRows (prefill-sized steps): 128×128 output tiles, 8 warps of 64×32, 32-column k tiles double-buffered through
// shared memory (the next tile's loads in registers while the current one multiplies), a chunk folded every four.
#include <mma.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_properties.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/gemm_fixed_order.h"
#include "core/error.h"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using RowsFragment = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
// Weights [n, k] row-major are the col-major B operand B[c][n] = w[n][c].
using WeightsFragment = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;

constexpr int kChunk = 128;  // the columns of one partial sum (an FP8 scale block's width)

struct Product {
  const bf16* x;
  int64_t ldx, stride_x;
  const void* w;
  int64_t ldw, stride_w;
  const float* scales;
  int64_t scale_ld, scale_stride;
  float* y;
  int64_t ldy, stride_y;
  int64_t m, n, k;
};

// A chunk's partial sum folded into the total: the one operation both kernels share.
template <bool kFp8>
__device__ inline void fold(Acc& total, const float* part, float scale) {
#pragma unroll
  for (int e = 0; e < Acc::num_elements; ++e)
    total.x[e] = kFp8 ? __fmaf_rn(scale, part[e], total.x[e]) : __fadd_rn(total.x[e], part[e]);
}

__device__ inline float chunk_scale(const Product& p, int64_t g, int64_t n0, int64_t chunk) {
  return p.scales[g * p.scale_stride + (n0 / kChunk) * p.scale_ld + chunk];
}

// Sixteen e4m3 codes as sixteen bf16 values (exact: every e4m3 value is a bf16 value).
__device__ inline void fp8x16_to_bf16(const uint4& v, uint4* out) {
  float f[16];
  fp8x16_to_float(v, f);
  auto* b = reinterpret_cast<__nv_bfloat162*>(out);
#pragma unroll
  for (int i = 0; i < 8; ++i) b[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
}

// ---- FewRows ----

constexpr int kFewWarps = 4;
constexpr int kFewLd = kChunk + 8;  // staged row stride (elements): rows start in different banks

// One chunk's operands in registers: 16 rows of x and 16 weight rows, 128 columns each (fewer in a last, shorter
// chunk), every lane's share loaded before any is stored, so a warp keeps its whole chunk in flight.
template <bool kFp8>
struct ChunkLoads {
  static constexpr int kW = kFp8 ? 4 : 8;  // 16-byte weight vectors per lane
  uint4 x[8];
  uint4 w[kW];
};

template <bool kFp8>
__device__ inline void load_chunk(const Product& p, int64_t g, int64_t r0, int64_t n0, int64_t c, int lane,
                                  ChunkLoads<kFp8>& t) {
  const int64_t k0 = c * kChunk;
  const int vectors = static_cast<int>(min(static_cast<int64_t>(kChunk), p.k - k0)) / 8;
  const bf16* x = p.x + g * p.stride_x;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int idx = lane + 32 * i, r = idx / 16, v = idx % 16;
    t.x[i] = make_uint4(0, 0, 0, 0);  // rows past m multiply as zeros; their outputs are dropped
    if (r0 + r < p.m && v < vectors) t.x[i] = *reinterpret_cast<const uint4*>(x + (r0 + r) * p.ldx + k0 + v * 8);
  }
#pragma unroll
  for (int i = 0; i < ChunkLoads<kFp8>::kW; ++i) {
    t.w[i] = make_uint4(0, 0, 0, 0);
    if constexpr (kFp8) {
      const int idx = lane + 32 * i, r = idx / 8, v = idx % 8;
      const auto* w = static_cast<const uint8_t*>(p.w) + g * p.stride_w;
      if (n0 + r < p.n && 2 * v < vectors) t.w[i] = *reinterpret_cast<const uint4*>(w + (n0 + r) * p.ldw + k0 + v * 16);
    } else {
      const int idx = lane + 32 * i, r = idx / 16, v = idx % 16;
      const bf16* w = static_cast<const bf16*>(p.w) + g * p.stride_w;
      if (n0 + r < p.n && v < vectors) t.w[i] = *reinterpret_cast<const uint4*>(w + (n0 + r) * p.ldw + k0 + v * 8);
    }
  }
}

template <bool kFp8>
__device__ inline void store_chunk(const ChunkLoads<kFp8>& t, int lane, bf16* xs, bf16* ws) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int idx = lane + 32 * i;
    *reinterpret_cast<uint4*>(&xs[(idx / 16) * kFewLd + (idx % 16) * 8]) = t.x[i];
  }
#pragma unroll
  for (int i = 0; i < ChunkLoads<kFp8>::kW; ++i) {
    const int idx = lane + 32 * i;
    if constexpr (kFp8) {
      uint4 b[2];
      fp8x16_to_bf16(t.w[i], b);
      *reinterpret_cast<uint4*>(&ws[(idx / 8) * kFewLd + (idx % 8) * 16]) = b[0];
      *reinterpret_cast<uint4*>(&ws[(idx / 8) * kFewLd + (idx % 8) * 16 + 8]) = b[1];
    } else {
      *reinterpret_cast<uint4*>(&ws[(idx / 16) * kFewLd + (idx % 16) * 8]) = t.w[i];
    }
  }
}

// A chunk's partial sum from its staged operands: the chain of 16-column steps from zero.
__device__ inline Acc chunk_partial(const Product& p, int64_t c, const bf16* xs, const bf16* ws) {
  const int width = static_cast<int>(min(static_cast<int64_t>(kChunk), p.k - c * kChunk));  // a multiple of 16
  Acc partial;
  wmma::fill_fragment(partial, 0.0f);
  for (int kk = 0; kk < width; kk += 16) {
    RowsFragment a;
    WeightsFragment b;
    wmma::load_matrix_sync(a, xs + kk, kFewLd);
    wmma::load_matrix_sync(b, ws + kk, kFewLd);
    wmma::mma_sync(partial, a, b, partial);
  }
  return partial;
}

template <bool kFp8>
__global__ void __launch_bounds__(kFewWarps * 32) few_rows_kernel(Product p) {
  const int64_t g = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.x) * 16, r0 = static_cast<int64_t>(blockIdx.y) * 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ __align__(32) bf16 xs[kFewWarps][16 * kFewLd];
  __shared__ __align__(32) bf16 ws[kFewWarps][16 * kFewLd];
  __shared__ __align__(32) float part[kFewWarps][32 * Acc::num_elements];
  const int64_t chunks = (p.k + kChunk - 1) / kChunk;
  Acc total;
  wmma::fill_fragment(total, 0.0f);
  // Warp w takes chunks w, w + kFewWarps, …: the next one's loads are issued before the current one multiplies.
  ChunkLoads<kFp8> loads;
  if (warp < chunks) load_chunk<kFp8>(p, g, r0, n0, warp, lane, loads);
  for (int64_t c0 = 0; c0 < chunks; c0 += kFewWarps) {
    const int64_t c = c0 + warp;
    if (c < chunks) {
      store_chunk<kFp8>(loads, lane, xs[warp], ws[warp]);
      __syncwarp();
      if (c + kFewWarps < chunks) load_chunk<kFp8>(p, g, r0, n0, c + kFewWarps, lane, loads);
      const Acc partial = chunk_partial(p, c, xs[warp], ws[warp]);
#pragma unroll
      for (int e = 0; e < Acc::num_elements; ++e) part[warp][lane * Acc::num_elements + e] = partial.x[e];
      __syncwarp();  // the staged operands are read before the next round overwrites them
    }
    __syncthreads();
    if (warp == 0)
      for (int j = 0; j < kFewWarps && c0 + j < chunks; ++j)
        fold<kFp8>(total, &part[j][lane * Acc::num_elements], kFp8 ? chunk_scale(p, g, n0, c0 + j) : 1.0f);
    __syncthreads();
  }
  if (warp != 0) return;
  float* tile = part[1];  // 16×16 floats; every other warp is done with it
  wmma::store_matrix_sync(tile, total, 16, wmma::mem_row_major);
  __syncwarp();
  float* y = p.y + g * p.stride_y;
  for (int i = lane; i < 256; i += 32) {
    const int64_t r = r0 + i / 16, col = n0 + i % 16;
    if (r < p.m && col < p.n) y[r * p.ldy + col] = tile[i];
  }
}

// ---- SplitChunks (at most 16 rows, narrow products) ----
// The few-rows kernel gives each 16 output channels one block, so a narrow product (a few hundred channels) leaves
// most SMs idle while it streams its weights. Here the chunks of a tile are spread over `splits` blocks, each
// warp writing its chunk's partial sums (the valid rows) to scratch [groups][chunks][m][n]; then one thread per
// output element folds them in chunk order — the same folds in the same order as the other kernels.

template <bool kFp8>
__global__ void __launch_bounds__(kFewWarps * 32) split_chunks_kernel(Product p, int64_t per_split, float* partials) {
  const int64_t g = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ __align__(32) bf16 xs[kFewWarps][16 * kFewLd];
  __shared__ __align__(32) bf16 ws[kFewWarps][16 * kFewLd];
  __shared__ __align__(32) float tile[kFewWarps][256];
  const int64_t chunks = (p.k + kChunk - 1) / kChunk;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * per_split, last = min(chunks, first + per_split);
  ChunkLoads<kFp8> loads;
  if (first + warp < last) load_chunk<kFp8>(p, g, 0, n0, first + warp, lane, loads);
  for (int64_t c = first + warp; c < last; c += kFewWarps) {
    store_chunk<kFp8>(loads, lane, xs[warp], ws[warp]);
    __syncwarp();
    if (c + kFewWarps < last) load_chunk<kFp8>(p, g, 0, n0, c + kFewWarps, lane, loads);
    const Acc partial = chunk_partial(p, c, xs[warp], ws[warp]);
    wmma::store_matrix_sync(tile[warp], partial, 16, wmma::mem_row_major);
    __syncwarp();
    float* out = partials + (g * chunks + c) * p.m * p.n;
    for (int i = lane; i < 256; i += 32) {
      const int64_t r = i / 16, col = n0 + i % 16;
      if (r < p.m && col < p.n) out[r * p.n + col] = tile[warp][i];
    }
    __syncwarp();  // staged operands and tile read before the next chunk overwrites them
  }
}

template <bool kFp8>
__global__ void fold_chunks_kernel(Product p, int64_t groups, const float* partials) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= groups * p.m * p.n) return;
  const int64_t g = i / (p.m * p.n), r = i / p.n % p.m, col = i % p.n;
  const int64_t chunks = (p.k + kChunk - 1) / kChunk;
  float total = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    const float part = partials[((g * chunks + c) * p.m + r) * p.n + col];
    total = kFp8 ? __fmaf_rn(chunk_scale(p, g, col, c), part, total) : __fadd_rn(total, part);
  }
  p.y[g * p.stride_y + r * p.ldy + col] = total;
}

// ---- ManyRows ----

constexpr int kTile = 128, kTileK = 32, kManyWarps = 8;
constexpr int kManyLd = kTileK + 8;
constexpr int kWarpRows = 64, kWarpCols = 32;  // 2 × 4 warps
constexpr int kRowFrags = kWarpRows / 16, kColFrags = kWarpCols / 16;

template <bool kFp8>
struct TileLoads {
  uint4 x[2];
  uint4 w[kFp8 ? 1 : 2];
};

// A thread's two 16-byte vectors of a 128-row × 32-column bf16 tile: rows row0 .. row0+127 (zeros from `rows`
// on), columns k0 .. k0+31 (zeros from k on).
__device__ inline void load_bf16_rows(const bf16* a, int64_t ld, int64_t row0, int64_t rows, int64_t k0, int64_t k,
                                      uint4* out) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int idx = threadIdx.x + i * kManyWarps * 32, r = idx / 4, v = idx % 4;
    const int64_t col = k0 + v * 8;
    out[i] = make_uint4(0, 0, 0, 0);
    if (row0 + r < rows && col < k) out[i] = *reinterpret_cast<const uint4*>(a + (row0 + r) * ld + col);
  }
}

template <bool kFp8>
__device__ inline void load_tile(const Product& p, int64_t g, int64_t m0, int64_t n0, int64_t k0, TileLoads<kFp8>& t) {
  load_bf16_rows(p.x + g * p.stride_x, p.ldx, m0, p.m, k0, p.k, t.x);
  if constexpr (kFp8) {
    const auto* w = static_cast<const uint8_t*>(p.w) + g * p.stride_w;
    const int r = threadIdx.x / 2, v = threadIdx.x % 2;
    const int64_t col = k0 + v * 16;
    t.w[0] = make_uint4(0, 0, 0, 0);
    if (n0 + r < p.n && col < p.k) t.w[0] = *reinterpret_cast<const uint4*>(w + (n0 + r) * p.ldw + col);
  } else {
    load_bf16_rows(static_cast<const bf16*>(p.w) + g * p.stride_w, p.ldw, n0, p.n, k0, p.k, t.w);
  }
}

template <bool kFp8>
__device__ inline void store_tile(const TileLoads<kFp8>& t, bf16 (*xs)[kManyLd], bf16 (*ws)[kManyLd]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int idx = threadIdx.x + i * kManyWarps * 32;
    *reinterpret_cast<uint4*>(&xs[idx / 4][(idx % 4) * 8]) = t.x[i];
  }
  if constexpr (kFp8) {
    uint4 b[2];
    fp8x16_to_bf16(t.w[0], b);  // zeros stay zeros
    const int r = threadIdx.x / 2, v = threadIdx.x % 2;
    *reinterpret_cast<uint4*>(&ws[r][v * 16]) = b[0];
    *reinterpret_cast<uint4*>(&ws[r][v * 16 + 8]) = b[1];
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = threadIdx.x + i * kManyWarps * 32;
      *reinterpret_cast<uint4*>(&ws[idx / 4][(idx % 4) * 8]) = t.w[i];
    }
  }
}

template <bool kFp8>
__global__ void __launch_bounds__(kManyWarps * 32, 1) many_rows_kernel(Product p) {
  const int64_t g = blockIdx.z, n0 = static_cast<int64_t>(blockIdx.x) * kTile, m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wr = (warp / 4) * kWarpRows, wc = (warp % 4) * kWarpCols;
  __shared__ __align__(32) bf16 xs[2][kTile][kManyLd];
  __shared__ __align__(32) bf16 ws[2][kTile][kManyLd];
  const int64_t tiles = (p.k + kTileK - 1) / kTileK;
  constexpr int64_t kTilesPerChunk = kChunk / kTileK;
  Acc partial[kRowFrags][kColFrags], total[kRowFrags][kColFrags];
#pragma unroll
  for (int i = 0; i < kRowFrags; ++i)
#pragma unroll
    for (int j = 0; j < kColFrags; ++j) {
      wmma::fill_fragment(partial[i][j], 0.0f);
      wmma::fill_fragment(total[i][j], 0.0f);
    }
  TileLoads<kFp8> next;
  load_tile<kFp8>(p, g, m0, n0, 0, next);
  store_tile<kFp8>(next, xs[0], ws[0]);
  __syncthreads();
  for (int64_t kt = 0; kt < tiles; ++kt) {
    const int buf = static_cast<int>(kt & 1);
    if (kt + 1 < tiles) load_tile<kFp8>(p, g, m0, n0, (kt + 1) * kTileK, next);
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      if (kt * kTileK + kk >= p.k) break;  // k is a multiple of 16, not always of 32
      WeightsFragment b[kColFrags];
#pragma unroll
      for (int j = 0; j < kColFrags; ++j) wmma::load_matrix_sync(b[j], &ws[buf][wc + j * 16][kk], kManyLd);
#pragma unroll
      for (int i = 0; i < kRowFrags; ++i) {
        RowsFragment a;
        wmma::load_matrix_sync(a, &xs[buf][wr + i * 16][kk], kManyLd);
#pragma unroll
        for (int j = 0; j < kColFrags; ++j) wmma::mma_sync(partial[i][j], a, b[j], partial[i][j]);
      }
    }
    if ((kt + 1) % kTilesPerChunk == 0 || kt + 1 == tiles) {
      const float scale = kFp8 ? chunk_scale(p, g, n0, kt / kTilesPerChunk) : 1.0f;
#pragma unroll
      for (int i = 0; i < kRowFrags; ++i)
#pragma unroll
        for (int j = 0; j < kColFrags; ++j) {
          fold<kFp8>(total[i][j], partial[i][j].x, scale);
          wmma::fill_fragment(partial[i][j], 0.0f);
        }
    }
    if (kt + 1 < tiles) store_tile<kFp8>(next, xs[buf ^ 1], ws[buf ^ 1]);
    __syncthreads();
  }
  // Epilogue: each warp's tiles through 16×16 floats of the (now idle) staging memory.
  float* tile = reinterpret_cast<float*>(&xs[0][0][0]) + warp * 256;
  float* y = p.y + g * p.stride_y;
#pragma unroll
  for (int i = 0; i < kRowFrags; ++i)
#pragma unroll
    for (int j = 0; j < kColFrags; ++j) {
      wmma::store_matrix_sync(tile, total[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int64_t r = m0 + wr + i * 16 + e / 16, col = n0 + wc + j * 16 + e % 16;
        if (r < p.m && col < p.n) y[r * p.ldy + col] = tile[e];
      }
      __syncwarp();
    }
}

static_assert(sizeof(bf16) * kTile * kManyLd >= sizeof(float) * 256 * kManyWarps, "the epilogue tiles fit in xs[0]");

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The kernels' choice (same bits whichever). Up to 16 rows: the split kernel while the few-rows kernel's blocks
// (one per 16 channels) would not fill the GPU twice over. Up to 64 rows, the few-rows kernel (weights read once
// per 16 rows, many blocks in flight), and beyond while the tiled kernel would leave most SMs idle; else the tiles.
int64_t split_count(int64_t n, int64_t k, int64_t groups) {
  const int64_t tiles = (n + 15) / 16 * groups, chunks = (k + kChunk - 1) / kChunk, want = 2 * multiprocessors();
  if (tiles >= want) return 1;
  // Each split keeps at least one chunk per warp.
  return std::max<int64_t>(1, std::min((want + tiles - 1) / tiles, chunks / kFewWarps));
}

FixedOrderKernel auto_kernel(int64_t m, int64_t n, int64_t k, int64_t groups) {
  if (m <= 16 && split_count(n, k, groups) > 1) return FixedOrderKernel::SplitChunks;
  const int64_t many_blocks = (n + kTile - 1) / kTile * ((m + kTile - 1) / kTile) * groups;
  return m > 64 && 4 * many_blocks >= multiprocessors() ? FixedOrderKernel::ManyRows : FixedOrderKernel::FewRows;
}

}  // namespace

int64_t fixed_order_split_floats(int64_t m, int64_t n, int64_t k, int64_t groups) {
  return groups * ((k + kChunk - 1) / kChunk) * m * n;
}

int64_t fixed_order_scratch_floats(int64_t m, int64_t n, int64_t k, int64_t groups) {
  if (m <= 0 || n <= 0 || k <= 0 || groups <= 0) return 0;
  return auto_kernel(m, n, k, groups) == FixedOrderKernel::SplitChunks ? fixed_order_split_floats(m, n, k, groups) : 0;
}

bool fixed_order_applies(GemmType weight_type, const void* x, int64_t ldx, int64_t stride_x, const void* w,
                         int64_t ldw, int64_t stride_w, int64_t k) {
  if (!aligned(x) || !aligned(w) || ldx % 8 != 0 || stride_x % 8 != 0 || k <= 0) return false;
  if (weight_type == GemmType::Bf16) return k % 16 == 0 && ldw % 8 == 0 && stride_w % 8 == 0;
  if (weight_type == GemmType::Fp8) return k % kChunk == 0 && ldw % 16 == 0 && stride_w % 16 == 0;
  return false;
}

void fixed_order_product(GemmType weight_type, const bf16* x, int64_t ldx, int64_t stride_x, const void* w,
                         int64_t ldw, int64_t stride_w, const float* scales, int64_t scale_ld, int64_t scale_stride,
                         float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t groups,
                         float* scratch, cudaStream_t stream, FixedOrderKernel kernel) {
  if (!fixed_order_applies(weight_type, x, ldx, stride_x, w, ldw, stride_w, k))
    fail("fixed-order product: a ", gemm_type_name(weight_type), " product of k = ", k,
         " it does not take (bf16: k a multiple of 16, FP8: of 128; whole aligned 16-byte vectors)");
  if (weight_type == GemmType::Fp8 && scales == nullptr) fail("fixed-order product: FP8 weights without scales");
  if (m <= 0 || n <= 0 || groups <= 0) return;
  if (groups > 65535) fail("fixed-order product: ", groups, " groups (at most 65535)");
  const Product p{x, ldx, stride_x, w, ldw, stride_w, scales, scale_ld, scale_stride, y, ldy, stride_y, m, n, k};
  const bool fp8 = weight_type == GemmType::Fp8;
  if (kernel == FixedOrderKernel::Auto) kernel = auto_kernel(m, n, k, groups);
  if (kernel == FixedOrderKernel::SplitChunks) {
    if (m > 16) fail("fixed-order product: the split kernel takes at most 16 rows, not ", m);
    if (scratch == nullptr) fail("fixed-order product: the split kernel without scratch");
    const int64_t chunks = (k + kChunk - 1) / kChunk, splits = split_count(n, k, groups);
    const int64_t per_split = (chunks + splits - 1) / splits;
    const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((chunks + per_split - 1) / per_split),
                    static_cast<unsigned>(groups));
    const int64_t outputs = groups * m * n;
    const auto fold_blocks = static_cast<unsigned>((outputs + 255) / 256);
    if (fp8) {
      split_chunks_kernel<true><<<grid, kFewWarps * 32, 0, stream>>>(p, per_split, scratch);
      fold_chunks_kernel<true><<<fold_blocks, 256, 0, stream>>>(p, groups, scratch);
    } else {
      split_chunks_kernel<false><<<grid, kFewWarps * 32, 0, stream>>>(p, per_split, scratch);
      fold_chunks_kernel<false><<<fold_blocks, 256, 0, stream>>>(p, groups, scratch);
    }
  } else if (kernel == FixedOrderKernel::ManyRows) {
    if ((m + kTile - 1) / kTile > 65535) fail("fixed-order product: ", m, " rows");
    const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile), static_cast<unsigned>((m + kTile - 1) / kTile),
                    static_cast<unsigned>(groups));
    if (fp8)
      many_rows_kernel<true><<<grid, kManyWarps * 32, 0, stream>>>(p);
    else
      many_rows_kernel<false><<<grid, kManyWarps * 32, 0, stream>>>(p);
  } else {
    if ((m + 15) / 16 > 65535) fail("fixed-order product: ", m, " rows");
    const dim3 grid(static_cast<unsigned>((n + 15) / 16), static_cast<unsigned>((m + 15) / 16),
                    static_cast<unsigned>(groups));
    if (fp8)
      few_rows_kernel<true><<<grid, kFewWarps * 32, 0, stream>>>(p);
    else
      few_rows_kernel<false><<<grid, kFewWarps * 32, 0, stream>>>(p);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
