#pragma once
// DeepSeek's own V4 numerics (`--precision official`; docs/official_numerics.md): the quantization and rounding
// steps of DeepSeek's public inference code, emulated exactly on the CPU. The reference numerics of this backend
// keep every activation in fp32; these hold them in bf16 between ops, as DeepSeek's code does, and quantize
// where it quantizes:
//   - activations to FP8 e4m3 in 1×128 blocks with power-of-two (UE8M0) scales before every FP8 or FP4 product,
//     whose partial sums are promoted per K block (128 for FP8 weights, 32 for FP4) with both scales;
//   - the non-RoPE dims of every KV entry through FP8 in 1×64 blocks (a switch: DeepSeek's two kernel versions
//     disagree on whether this rounds);
//   - the indexer's queries and keys through a Walsh–Hadamard rotation and FP4 e2m1 in 1×32 blocks.
// The facts and their sources: ../shared/research/deepseek_v4_official_numerics.md (copied into the doc above).
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace strata::cpu::official {

// Round to nearest even into bf16 and back (torch's fp32 → bf16 cast).
float round_bf16(float x);
void round_bf16(float* x, int64_t n);
void round_bf16(Mat& x);

// Nearest e4m3 value (ties to even, as the CUDA cast), saturating at ±448.
float round_e4m3(float x);
// Nearest e2m1 value (ties to even: {0, .5, 1, 1.5, 2, 3, 4, 6}), saturating at ±6.
float round_e2m1(float x);
// 2^ceil(log2 t) for t > 0, exactly (DeepSeek takes the exponent bits and adds one when any mantissa bit is set).
float pow2_ceil(float t);

// act_quant: each row's 1×`block` blocks (the last may be shorter) as FP8 codes and one power-of-two scale each:
// amax (at least 1e-4) × fp32(1/448), rounded up to a power of two; code = e4m3(clamp(x / scale, ±448)).
struct QuantizedActivations {
  int64_t rows = 0, cols = 0, block = 0;
  std::vector<float> codes;   // [rows, cols], each an e4m3 value
  std::vector<float> scales;  // [rows, ceil(cols / block)]
  float scale(int64_t r, int64_t k) const { return scales[static_cast<size_t>(r * ((cols + block - 1) / block) + k / block)]; }
};
QuantizedActivations quantize_activations(const Mat& x, int64_t block);

// In place: x[0, n) in 1×`block` blocks through FP8 as act_quant does, then back (code × scale, in bf16). With
// `rounds` false the values pass through bf16 only (DeepSeek's other kernel version: a no-op on bf16 input).
void fake_fp8(float* x, int64_t n, int64_t block, bool rounds);
// In place: x[0, n) in 1×32 blocks through FP4 e2m1 with power-of-two scales 2^ceil(log2(amax / 6)), amax at
// least 6·2^-126, then back (code × scale, in bf16): fp4_act_quant.
void fake_fp4(float* x, int64_t n);
// In place: the Sylvester-ordered Walsh–Hadamard transform of x[0, n) (n a power of two) scaled by n^-½, from bf16
// input (rounded first) to bf16 output: rotate_activation.
void hadamard_bf16(float* x, int64_t n);

// y = x · wᵀ for an FP8 (128×128-block) or FP4 (1×32-block) weight: x quantized by quantize_activations(x, 128),
// each K block's fp32 partial sum of code products multiplied by both blocks' scales and added in K order, the
// result rounded to bf16 (fp8_gemm / fp4_gemm).
Mat quantized_product(const Mat& x, const WeightRef& w);
// y = x · wᵀ as torch's bf16 F.linear: weights rounded to bf16, x taken as bf16 values, fp32 sums, bf16 result.
Mat bf16_product(const Mat& x, const WeightRef& w);
// The product DeepSeek's code runs for `w`: fp32-product ones (WeightRef::fp32_product) a plain fp32 product,
// FP8/FP4 weights quantized_product, others bf16_product.
Mat product(const Mat& x, const WeightRef& w);

}  // namespace strata::cpu::official
