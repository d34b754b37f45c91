#pragma once
// FP8 weights on the device (GemmType::Fp8): a DeepSeek checkpoint's e4m3 codes with one fp32 scale per 128×128
// block, uploaded exactly as stored. Products with them take one of three paths (linear.cpp):
//   - prefill-sized steps: activations quantized per row and 128 columns (quantize_fp8_rows), then cuBLASLt's
//     block-scaled FP8 GEMM (Gemm::fp8) — DeepSeek's own recipe;
//   - decode-sized steps (≤ kGemvMaxRows rows): weight-only FP8 (gemv_fp8) — bf16 activations, the weights
//     dequantized in registers, fp32 accumulation: decode is bound by reading the weights, which FP8 halves, and
//     the activations keep bf16's precision;
//   - shapes cuBLASLt has no FP8 algorithm for (partial 128-blocks, as in the tiny test models): the weights
//     dequantized into scratch as bf16 (dequantize_fp8) and the bf16 GEMM.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

// The e4m3 largest finite value: a block's scale maps its largest magnitude onto it.
constexpr float kFp8Max = 448.0f;
constexpr int64_t kFp8Block = 128;

// Quantized activations have their rows padded to a multiple of 16 (zero rows): cuBLASLt's FP8 GEMM with VEC128
// scales took token counts like 128 and 1024 on the H200 but had no algorithm for 9 or 333, and the scale tensor's
// leading dimension (the token count) is then a whole number of 16-byte vectors, which leaves no doubt about it.
inline int64_t fp8_padded_rows(int64_t m) { return (m + 15) / 16 * 16; }

// x fp32 [m, k] (row stride ldx) → codes e4m3 [fp8_padded_rows(m), k] (row stride k) and scales
// [ceil(k/128)][fp8_padded_rows(m)] (token index fastest: the layout cuBLASLt's VEC128_32F mode reads). Per row and
// 128-column block: scale = max(amax, 1e-30)/448, code = e4m3(x / scale) rounded to nearest even, saturating (the
// op checks repeat this on the CPU). Padding rows get zero codes.
void quantize_fp8_rows(const float* x, int64_t ldx, int64_t m, int64_t k, uint8_t* codes, float* scales,
                       cudaStream_t stream);

// out[r, c] = bf16(e4m3(w[r, c]) · scales[r/128, c/128]) for a [rows, cols] FP8 matrix (ceil(cols/128) scale
// columns): the fallback for shapes the FP8 GEMM does not take.
void dequantize_fp8(const uint8_t* w, const float* scales, int64_t rows, int64_t cols, __nv_bfloat16* out,
                    cudaStream_t stream);

// y[t, n] = Σ_c x[t, c] · e4m3(w[n, c]) · scales[n/128, c/128] for t < m ≤ kGemvMaxRows: x bf16, fp32 accumulation
// and output. `batch` products at element strides (stride_s: between the products' first scale rows, in floats),
// as gemv. scale_cols = ceil(k_total/128) of the matrix the scales belong to.
bool gemv_fp8_applies(const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw, int64_t stride_w,
                      int64_t m, int64_t k);
void gemv_fp8(const __nv_bfloat16* x, int64_t ldx, int64_t stride_x, const uint8_t* w, int64_t ldw, int64_t stride_w,
              const float* scales, int64_t scale_cols, int64_t stride_s, float* y, int64_t ldy, int64_t stride_y,
              int64_t m, int64_t n, int64_t k, int64_t batch, cudaStream_t stream);

// y[r, c] = float(x[r, c]) for x bf16 [m, n] (row stride n), y row stride ldy.
void widen_bf16_rows(const __nv_bfloat16* x, int64_t m, int64_t n, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace strata::cuda
