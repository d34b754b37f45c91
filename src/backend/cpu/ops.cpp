#include "backend/cpu/ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace strata::cpu {

namespace {

// Eight fp32 lanes (GCC vector extension): one AVX register where the CPU has AVX2, two SSE registers otherwise.
// Lane j of a dot product's accumulator holds Σ a[k + j]·b[k + j] over k = 0, 8, 16, …, exactly as the scalar
// reference's acc[j]: products are rounded, then added (no FMA: the clones below never enable it), so every
// result is bit-identical whichever clone runs.
typedef float F8 __attribute__((vector_size(32)));
// The same vector read from or written to any float address (unaligned; may alias the floats).
typedef float F8u __attribute__((vector_size(32), aligned(4), may_alias));

inline const F8u& load8(const float* p) { return *reinterpret_cast<const F8u*>(p); }
inline void store8(float* p, const F8& v) { *reinterpret_cast<F8u*>(p) = v; }

// The reference's fixed reduction of the eight lanes, then the scalar tail from k.
inline float finish_dot(const F8& acc, const float* a, const float* b, int64_t k, int64_t n) {
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

}  // namespace

// The kernels below are compiled twice (AVX2 and baseline x86-64) and picked once at load time; AVX2 without FMA,
// so that no multiply-add is ever contracted and both clones give the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATA_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STRATA_CPU_CLONES
#endif

STRATA_CPU_CLONES float dot(const float* a, const float* b, int64_t n) {
  F8 acc = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) acc += load8(a + k) * load8(b + k);
  return finish_dot(acc, a, b, k, n);
}

STRATA_CPU_CLONES void dot_rows(const float* x, const float* rows, int64_t stride, int64_t count, int64_t n,
                                float* out) {
  int64_t r = 0;
  // Four rows at a time share each load of x.
  for (; r + 4 <= count; r += 4) {
    const float* w0 = rows + r * stride;
    const float *w1 = w0 + stride, *w2 = w1 + stride, *w3 = w2 + stride;
    F8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
      const F8 xv = load8(x + k);
      a0 += xv * load8(w0 + k);
      a1 += xv * load8(w1 + k);
      a2 += xv * load8(w2 + k);
      a3 += xv * load8(w3 + k);
    }
    out[r] = finish_dot(a0, x, w0, k, n);
    out[r + 1] = finish_dot(a1, x, w1, k, n);
    out[r + 2] = finish_dot(a2, x, w2, k, n);
    out[r + 3] = finish_dot(a3, x, w3, k, n);
  }
  for (; r < count; ++r) {
    const float* w = rows + r * stride;
    F8 acc = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) acc += load8(x + k) * load8(w + k);
    out[r] = finish_dot(acc, x, w, k, n);
  }
}

STRATA_CPU_CLONES void dot_many(const float* x, const float* const* rows, int64_t count, int64_t n, float* out) {
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) {
    const float *w0 = rows[r], *w1 = rows[r + 1], *w2 = rows[r + 2], *w3 = rows[r + 3];
    F8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
      const F8 xv = load8(x + k);
      a0 += xv * load8(w0 + k);
      a1 += xv * load8(w1 + k);
      a2 += xv * load8(w2 + k);
      a3 += xv * load8(w3 + k);
    }
    out[r] = finish_dot(a0, x, w0, k, n);
    out[r + 1] = finish_dot(a1, x, w1, k, n);
    out[r + 2] = finish_dot(a2, x, w2, k, n);
    out[r + 3] = finish_dot(a3, x, w3, k, n);
  }
  for (; r < count; ++r) {
    const float* w = rows[r];
    F8 acc = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) acc += load8(x + k) * load8(w + k);
    out[r] = finish_dot(acc, x, w, k, n);
  }
}

STRATA_CPU_CLONES void accumulate_rows(float* y, const float* weights, const float* const* rows, int64_t count,
                                       int64_t n) {
  int64_t c = 0;
  // 32 columns at a time stay in registers across all rows; each y[c] still adds the rows in order.
  for (; c + 32 <= n; c += 32) {
    F8 y0 = load8(y + c), y1 = load8(y + c + 8), y2 = load8(y + c + 16), y3 = load8(y + c + 24);
    for (int64_t j = 0; j < count; ++j) {
      const float* r = rows[j] + c;
      const float p = weights[j];
      y0 += p * load8(r);
      y1 += p * load8(r + 8);
      y2 += p * load8(r + 16);
      y3 += p * load8(r + 24);
    }
    store8(y + c, y0);
    store8(y + c + 8, y1);
    store8(y + c + 16, y2);
    store8(y + c + 24, y3);
  }
  for (; c + 8 <= n; c += 8) {
    F8 y0 = load8(y + c);
    for (int64_t j = 0; j < count; ++j) y0 += weights[j] * load8(rows[j] + c);
    store8(y + c, y0);
  }
  for (; c < n; ++c)
    for (int64_t j = 0; j < count; ++j) y[c] += weights[j] * rows[j][c];
}

Mat linear(const Mat& x, const WeightRef& w) {
  Mat y(x.rows, w.rows);
  // Blocks of output rows: each block's weights are converted to fp32 once and reused for every token. Aligned
  // fp32 weights (e.g. a dequantized head) are read where they are: copying them would only add memory traffic.
  const bool fp32_in_place = w.dtype == DType::F32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
  constexpr int64_t kBlock = 8;
  const int64_t nblocks = (w.rows + kBlock - 1) / kBlock;
#pragma omp parallel if (nblocks > 1)
  {
    std::vector<float> wbuf(fp32_in_place ? 0 : static_cast<size_t>(kBlock * w.cols));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t r0 = b * kBlock, r1 = std::min(w.rows, r0 + kBlock);
      const float* block = nullptr;
      if (fp32_in_place) {
        block = reinterpret_cast<const float*>(w.data) + r0 * w.cols;
      } else {
        for (int64_t r = r0; r < r1; ++r) w.row_f32(r, wbuf.data() + (r - r0) * w.cols);
        block = wbuf.data();
      }
      for (int64_t i = 0; i < x.rows; ++i) dot_rows(x.row(i), block, w.cols, r1 - r0, w.cols, y.row(i) + r0);
    }
  }
  return y;
}
void rms_norm(float* x, int64_t n, const float* weight, double eps) {
  float ss = dot(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + static_cast<float>(eps));
  if (weight)
    for (int64_t i = 0; i < n; ++i) x[i] = weight[i] * (x[i] * inv);
  else
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv;
}

void rms_norm_rows(Mat& x, const float* weight, double eps) {
#pragma omp parallel for schedule(static) if (x.rows > 4)
  for (int64_t r = 0; r < x.rows; ++r) rms_norm(x.row(r), x.cols, weight, eps);
}

void rope_interleaved(float* x, int64_t half, const float* cos, const float* sin, bool inverse) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    const float s = inverse ? -sin[i] : sin[i];
    // torch: rope * cos + rotate_half(rope) * sin, rotate_half(a, b) = (-b, a).
    x[2 * i] = a * cos[i] + (-b) * s;
    x[2 * i + 1] = b * cos[i] + a * s;
  }
}

void sinkhorn(float* comb, int64_t hc, int64_t iters, float eps) {
  if (hc == 4) {
    // V4's hc_mult: the 4×4 matrix in four 4-lane rows, so that each normalisation is four vector divisions (the
    // same sums in the same order, the same correctly rounded quotients as the loops below).
    typedef float F4 __attribute__((vector_size(16)));
    F4 r[4];
    std::memcpy(r, comb, sizeof r);
    auto normalize_columns = [&] {
      F4 sum = {0, 0, 0, 0};
      for (int i = 0; i < 4; ++i) sum += r[i];
      const F4 den = sum + eps;
      for (int i = 0; i < 4; ++i) r[i] /= den;
    };
    auto normalize_rows = [&] {
      // Lane i of column j is row i's j-th value: row sums as column vectors added in order j = 0..3.
      F4 sum = {0, 0, 0, 0};
      for (int j = 0; j < 4; ++j) sum += F4{r[0][j], r[1][j], r[2][j], r[3][j]};
      for (int i = 0; i < 4; ++i) r[i] /= sum[i] + eps;
    };
    normalize_columns();
    for (int64_t it = 0; it + 1 < iters; ++it) {
      normalize_rows();
      normalize_columns();
    }
    std::memcpy(comb, r, sizeof r);
    return;
  }
  auto normalize_columns = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      float sum = 0;
      for (int64_t i = 0; i < hc; ++i) sum += comb[i * hc + j];
      for (int64_t i = 0; i < hc; ++i) comb[i * hc + j] /= sum + eps;
    }
  };
  auto normalize_rows = [&] {
    for (int64_t i = 0; i < hc; ++i) {
      float sum = 0;
      for (int64_t j = 0; j < hc; ++j) sum += comb[i * hc + j];
      for (int64_t j = 0; j < hc; ++j) comb[i * hc + j] /= sum + eps;
    }
  };
  normalize_columns();
  for (int64_t it = 0; it + 1 < iters; ++it) {
    normalize_rows();
    normalize_columns();
  }
}

void softmax(float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  if (m == -INFINITY) {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return;
  }
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    s += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= s;
}

}  // namespace strata::cpu
