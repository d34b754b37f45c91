#pragma once
// The CPU backend's operations: the readable fp32 reference every faster backend is tested against.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace strata::cpu {

// Σ a[k]·b[k] in a fixed order: eight interleaved partial sums (k mod 8), combined pairwise, then the tail. Every
// dot product of the CPU backend sums in this order, so its results do not depend on which kernel computed them.
float dot(const float* a, const float* b, int64_t n);
// out[r] = dot(x, rows + r·stride, n) for r < count.
void dot_rows(const float* x, const float* rows, int64_t stride, int64_t count, int64_t n, float* out);
// out[r] = dot(x, rows[r], n) for r < count.
void dot_many(const float* x, const float* const* rows, int64_t count, int64_t n, float* out);
// y[c] += weights[j] · rows[j][c] for j = 0, 1, … count − 1 in turn (that order), for c < n.
void accumulate_rows(float* y, const float* weights, const float* const* rows, int64_t count, int64_t n);

// y[i, o] = Σ_k x[i, k] · w[o, k]  (torch's F.linear without bias). Parallel over output features.
Mat linear(const Mat& x, const WeightRef& w);

// In-place RMSNorm of every row: x · rsqrt(mean(x²) + eps) [· weight]. `weight` may be null (unweighted).
void rms_norm_rows(Mat& x, const float* weight, double eps);
void rms_norm(float* x, int64_t n, const float* weight, double eps);

// Interleaved RoPE on `x[0 .. 2·half)`: pairs (x[2i], x[2i+1]) rotate by angle i, given cos/sin per pair.
// `inverse` rotates by the negative angle (V4 undoes the rotation on the attention output).
void rope_interleaved(float* x, int64_t half, const float* cos, const float* sin, bool inverse);

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with its default threshold 20 (linear above it).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Sinkhorn-Knopp onto a doubly-stochastic hc×hc matrix (mHC, paper §2.2): columns first, then rows and columns
// alternately, `iters` normalisations of columns in all; each divides by (sum + eps).
void sinkhorn(float* comb, int64_t hc, int64_t iters, float eps);

// The indices of the k largest scores (at most all of them), largest first, ties to the lower index (as CUDA's topk).
std::vector<int32_t> top_k_entries(const std::vector<float>& score, int64_t k);

// In-place softmax over n values (max-subtracted, fp32).
void softmax(float* x, int64_t n);

}  // namespace strata::cpu
