// Products with a handful of rows (decode): y[t, n] = x[t, :] · w[n, :] for t < m ≤ kGemvMaxRows. Such a product
// is bound by reading w once, so the kernel is built for that: one warp per output channel, each lane streaming
// 16-byte vectors of the weight row with kUnroll loads in flight, the few activation rows read from cache. `batch`
// independent products (the grouped o-projection) run as blockIdx.y.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm_element.cuh"
#include "backend/cuda/gemv.h"

namespace strata::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;


template <typename T, int M>
__global__ void gemv_kernel(const T* x, int64_t ldx, int64_t stride_x, const T* w, int64_t ldw, int64_t stride_w,
                            float* y, int64_t ldy, int64_t stride_y, int m, int64_t n, int64_t k) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= n) return;
  const int64_t g = blockIdx.y;
  x += g * stride_x;
  y += g * stride_y;
  const T* wr = w + g * stride_w + row * ldw;
  float acc[M] = {};
  for (int64_t c0 = static_cast<int64_t>(lane) * kVec; c0 < k; c0 += 32 * kVec * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * 32 * kVec;
      if (c < k) wv[u] = *reinterpret_cast<const uint4*>(wr + c);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t c = c0 + static_cast<int64_t>(u) * 32 * kVec;
      if (c >= k) break;
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
#pragma unroll
  for (int t = 0; t < M; ++t) {
    for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
    if (lane == 0 && t < m) y[t * ldy + row] = acc[t];
  }
}

template <typename T, int M>
void launch(const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w, float* y,
            int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + kWarps - 1) / kWarps), static_cast<unsigned>(batch));
  gemv_kernel<T, M><<<grid, kWarps * 32, 0, stream>>>(static_cast<const T*>(x), ldx, stride_x,
                                                      static_cast<const T*>(w), ldw, stride_w, y, ldy, stride_y,
                                                      static_cast<int>(m), n, k);
  STRATA_CUDA_CHECK_LAUNCH();
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
