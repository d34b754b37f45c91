// Products with a handful of rows (decode): y[t, n] = x[t, :] · w[n, :] for t < m ≤ kGemvMaxRows. Such a product
// is bound by reading w once, so the kernel is built for that: each output channel's weight row is streamed by S
// warps (S = 1, 2, 4 or 8 slices of k), each lane keeping kUnroll 16-byte vectors in flight, the few activation rows
// read from cache; the slices' sums meet in shared memory in a fixed order. S grows until the grid fills the GPU
// (eight blocks per SM), so a narrow matrix (a 512-channel projection: 64 blocks at S = 1) still keeps every SM's loads in
// flight. S depends only on the matrix's shape, never on m: a row's result is the same in any batch. `batch`
// independent products (the grouped o-projection) run as blockIdx.y.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/gemv.h"

namespace strata::cuda {

namespace {

constexpr int kWarps = 8;

template <typename T, int M, int S>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* x, int64_t ldx, int64_t stride_x, const T* w, int64_t ldw, int64_t stride_w, float* y,
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

int multiprocessors() {
  static const int count = [] {
    int device = 0, sms = 0;
    STRATA_CUDA_CHECK(cudaGetDevice(&device));
    STRATA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  return count;
}

template <typename T, int M, int S>
void launch_split(const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w, float* y,
                  int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarps / S;
  const dim3 grid(static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(batch));
  gemv_kernel<T, M, S><<<grid, kWarps * 32, 0, stream>>>(static_cast<const T*>(x), ldx, stride_x,
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
  if (type == GemmType::Bf16)
    dispatch<__nv_bfloat16>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
  else
    dispatch<float>(x, ldx, stride_x, w, ldw, stride_w, y, ldy, stride_y, m, n, k, batch, stream);
}

}  // namespace strata::cuda
