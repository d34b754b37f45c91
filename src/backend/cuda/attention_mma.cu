// Prefill attention on tensor cores. V4's attention is multi-query with one shared key (= value) vector per key, so
// for one query token the 64 heads all read the same keys: the heads are the M dimension of two small products,
// S = Q · Kᵀ (heads × keys) and O = P · K (heads × head_dim). One block per query row (and group of 64 heads) walks
// the row's keys 32 at a time: it gathers them (fp32, through the row's key pointers) into shared memory as fp16,
// and eight warps run fp16 mma.sync with fp32 accumulation. Warp w owns 16 heads (w mod 4) and half of the output
// columns (w / 4); both warps of a head tile compute that tile's S in full (the cheaper half of the work), so the
// online softmax (max, rescale, sum — FlashAttention's, started from the head's sink) stays in registers, and the
// probabilities go from the S accumulators straight into the A operand of P · K.
//
// The operands are rounded to fp16 (q, keys, probabilities), not bf16: the products' inputs are RMS-normalised
// (q per head, keys by kv_norm and the compressors' norms; probabilities ≤ 1), well inside fp16's range, and fp16's
// 11-bit significand keeps the rounding 8× below bf16's — with bf16 operands the random tiny model's logits moved
// by p95 2.3e-2 from the fp32 reference at 530 tokens, against 1.8e-2 with the fp32 kernel. The fp32 reference
// precision keeps the fp32 kernels (attention.cu).
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

namespace {

constexpr int kWarps = 8;
constexpr int kHeadTile = 16;            // heads per warp (the mma's M)
constexpr int kHeadsPerBlock = 4 * kHeadTile;
constexpr int kChunk = 32;               // keys per pass

// Shared-memory rows are padded by 8 halves (16 bytes), so the 8 rows of an ldmatrix fall on distinct banks.
template <int D>
__host__ __device__ constexpr int row_stride() {
  return D + 8;
}

template <int D>
constexpr size_t shared_bytes() {
  return static_cast<size_t>(kHeadsPerBlock + kChunk) * row_stride<D>() * sizeof(__half);
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c += a · b for one m16n8k16 tile (fp16 operands, fp32 accumulators).
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32, 1)
    attention_mma_kernel(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                         const float* sinks, float* out, int64_t heads, float scale) {
  static_assert(D % 32 == 0, "each warp's half of head_dim is whole 16-column pairs of n-tiles");
  constexpr int kLd = row_stride<D>();
  constexpr int kHalf = D / 2, kTiles = kHalf / 8;  // output columns per warp, as n-tiles of 8
  extern __shared__ __align__(16) unsigned char smem[];
  auto* qs = reinterpret_cast<__half*>(smem);  // [64 heads][kLd]
  __half* ks = qs + kHeadsPerBlock * kLd;      // [kChunk keys][kLd]
  __shared__ const float* kp[kChunk];

  const int64_t row = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kHeadsPerBlock;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = warp % 4, half = warp / 4;
  const int g = lane / 4, t = lane % 4;  // the mma fragments' row group and column pair
  const int n = key_count[row];
  const float* const* row_keys = keys + row * max_keys;

  // The block's 64 heads of q as fp16 (heads past the last are zeros).
  for (int i = threadIdx.x; i < kHeadsPerBlock * (D / 4); i += blockDim.x) {
    const int h = i / (D / 4), c = (i % (D / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h0 + h < heads) v = *reinterpret_cast<const float4*>(q + ((row * heads + h0 + h) * D + c));
    auto* dst = reinterpret_cast<uint2*>(qs + h * kLd + c);
    *dst = make_uint2(pack_f16(v.x, v.y), pack_f16(v.z, v.w));
  }

  const bool active = h0 + tile * kHeadTile < heads;
  const int64_t head_lo = h0 + tile * kHeadTile + g, head_hi = head_lo + 8;
  // Online softmax state of rows g and g + 8 of this warp's tile, started from the sink: m = sink, Σ = e⁰.
  float m_lo = head_lo < heads ? sinks[head_lo] : 0.0f, m_hi = head_hi < heads ? sinks[head_hi] : 0.0f;
  float l_lo = 1.0f, l_hi = 1.0f;
  float o[kTiles][4];
#pragma unroll
  for (int i = 0; i < kTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

  for (int c0 = 0; c0 < n; c0 += kChunk) {
    __syncthreads();  // the previous chunk's keys are read (and, the first time, q is written)
    if (threadIdx.x < kChunk) kp[threadIdx.x] = c0 + static_cast<int>(threadIdx.x) < n ? row_keys[c0 + threadIdx.x] : nullptr;
    __syncthreads();
    for (int i = threadIdx.x; i < kChunk * (D / 4); i += blockDim.x) {
      const int j = i / (D / 4), c = (i % (D / 4)) * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (kp[j]) v = *reinterpret_cast<const float4*>(kp[j] + c);
      *reinterpret_cast<uint2*>(ks + j * kLd + c) = make_uint2(pack_f16(v.x, v.y), pack_f16(v.z, v.w));
    }
    __syncthreads();
    if (!active) continue;

    // S = Q · Kᵀ for this warp's 16 heads and the chunk's 32 keys: four n-tiles of 8 keys.
    float s[4][4] = {};
    const __half* q_tile = qs + tile * kHeadTile * kLd;
#pragma unroll 4
    for (int k0 = 0; k0 < D; k0 += 16) {
      uint32_t a[4];
      ldmatrix_x4(a, q_tile + ((lane & 7) + ((lane >> 3) & 1) * 8) * kLd + k0 + (lane >> 4) * 8);
#pragma unroll
      for (int pair = 0; pair < 2; ++pair) {  // keys 16·pair … 16·pair + 15
        uint32_t b[4];
        ldmatrix_x4(b, ks + (pair * 16 + (lane & 7) + (lane >> 4) * 8) * kLd + k0 + ((lane >> 3) & 1) * 8);
        mma_f16(s[2 * pair], a, b[0], b[1]);
        mma_f16(s[2 * pair + 1], a, b[2], b[3]);
      }
    }
    // Scale, mask the keys past the row's last, and take the chunk's row maxima (a row lives in a lane quad).
    float max_lo = m_lo, max_hi = m_hi;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool valid = c0 + j * 8 + 2 * t + e < n;
        s[j][e] = valid ? s[j][e] * scale : -FLT_MAX;
        s[j][2 + e] = valid ? s[j][2 + e] * scale : -FLT_MAX;
        max_lo = fmaxf(max_lo, s[j][e]);
        max_hi = fmaxf(max_hi, s[j][2 + e]);
      }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      max_lo = fmaxf(max_lo, __shfl_xor_sync(0xffffffffu, max_lo, off));
      max_hi = fmaxf(max_hi, __shfl_xor_sync(0xffffffffu, max_hi, off));
    }
    const float alpha_lo = expf(m_lo - max_lo), alpha_hi = expf(m_hi - max_hi);
    m_lo = max_lo;
    m_hi = max_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[j][e] = s[j][e] == -FLT_MAX ? 0.0f : expf(s[j][e] - m_lo);
        s[j][2 + e] = s[j][2 + e] == -FLT_MAX ? 0.0f : expf(s[j][2 + e] - m_hi);
        sum_lo += s[j][e];
        sum_hi += s[j][2 + e];
      }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, off);
      sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, off);
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      o[i][0] *= alpha_lo;
      o[i][1] *= alpha_lo;
      o[i][2] *= alpha_hi;
      o[i][3] *= alpha_hi;
    }
    // O += P · K over this warp's half of the columns; P's accumulators are already the A fragments' layout.
#pragma unroll
    for (int kstep = 0; kstep < 2; ++kstep) {
      const uint32_t a[4] = {pack_f16(s[2 * kstep][0], s[2 * kstep][1]), pack_f16(s[2 * kstep][2], s[2 * kstep][3]),
                             pack_f16(s[2 * kstep + 1][0], s[2 * kstep + 1][1]),
                             pack_f16(s[2 * kstep + 1][2], s[2 * kstep + 1][3])};
      const __half* k_rows = ks + (kstep * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kLd + half * kHalf + (lane >> 4) * 8;
#pragma unroll
      for (int i = 0; i < kTiles; i += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, k_rows + i * 8);
        mma_f16(o[i], a, b[0], b[1]);
        mma_f16(o[i + 1], a, b[2], b[3]);
      }
    }
  }
  if (!active) return;
  const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const int64_t col = half * kHalf + i * 8 + 2 * t;
    if (head_lo < heads)
      *reinterpret_cast<float2*>(out + (row * heads + head_lo) * D + col) = make_float2(o[i][0] * inv_lo, o[i][1] * inv_lo);
    if (head_hi < heads)
      *reinterpret_cast<float2*>(out + (row * heads + head_hi) * D + col) = make_float2(o[i][2] * inv_hi, o[i][3] * inv_hi);
  }
}

template <int D>
void launch(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys, const float* sinks,
            float* out, int64_t rows, int64_t heads, float scale, cudaStream_t stream) {
  constexpr size_t shared = shared_bytes<D>();
  if (shared > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(attention_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((heads + kHeadsPerBlock - 1) / kHeadsPerBlock));
  attention_mma_kernel<D><<<grid, kWarps * 32, shared, stream>>>(q, keys, key_count, max_keys, sinks, out, heads, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_mma_supported(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512;
}

void sparse_attention_mma(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                          const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                          cudaStream_t stream) {
  if (rows == 0 || heads == 0) return;
  switch (head_dim) {
    case 32: return launch<32>(q, keys, key_count, max_keys, sinks, out, rows, heads, scale, stream);
    case 64: return launch<64>(q, keys, key_count, max_keys, sinks, out, rows, heads, scale, stream);
    case 128: return launch<128>(q, keys, key_count, max_keys, sinks, out, rows, heads, scale, stream);
    case 256: return launch<256>(q, keys, key_count, max_keys, sinks, out, rows, heads, scale, stream);
    case 512: return launch<512>(q, keys, key_count, max_keys, sinks, out, rows, heads, scale, stream);
    default: fail("sparse_attention_mma: head_dim ", head_dim, " (tensor-core attention takes 32, 64, 128, 256, 512)");
  }
}

}  // namespace strata::cuda
