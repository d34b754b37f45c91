#include "backend/cpu/ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
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

// finish_dot for four accumulators at once: the same pairwise sums of the same lanes, computed lane-parallel
// (pairs, then pairs of pairs, then the two halves), so each result has the bits finish_dot would give it. The
// shuffles stay within 128-bit halves (one shufps each on AVX).
inline void finish_dot4(const F8& a, const F8& b, const F8& c, const F8& d, const float* x, const float* const w[4],
                        int64_t k, int64_t n, float* out) {
  typedef int I8 __attribute__((vector_size(32)));
  typedef float F4 __attribute__((vector_size(16)));
  const I8 even = {0, 2, 8, 10, 4, 6, 12, 14}, odd = {1, 3, 9, 11, 5, 7, 13, 15};
  // [a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7]
  const F8 ab = __builtin_shuffle(a, b, even) + __builtin_shuffle(a, b, odd);
  const F8 cd = __builtin_shuffle(c, d, even) + __builtin_shuffle(c, d, odd);
  // [(a0+a1)+(a2+a3), b…, c…, d…, (a4+a5)+(a6+a7), b…, c…, d…]
  const F8 quads = __builtin_shuffle(ab, cd, even) + __builtin_shuffle(ab, cd, odd);
  const F4 lo = {quads[0], quads[1], quads[2], quads[3]}, hi = {quads[4], quads[5], quads[6], quads[7]};
  const F4 sums = lo + hi;
  for (int r = 0; r < 4; ++r) {
    float s = sums[r];
    for (int64_t j = k; j < n; ++j) s += x[j] * w[r][j];
    out[r] = s;
  }
}

// x against four weight rows, each load of x shared by the four accumulators; each result has dot's bits.
inline void dot4(const float* x, const float* const w[4], int64_t n, float* out) {
  F8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const F8 xv = load8(x + k);
    a0 += xv * load8(w[0] + k);
    a1 += xv * load8(w[1] + k);
    a2 += xv * load8(w[2] + k);
    a3 += xv * load8(w[3] + k);
  }
  finish_dot4(a0, a1, a2, a3, x, w, k, n, out);
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
    const float* const w[4] = {w0, w0 + stride, w0 + 2 * stride, w0 + 3 * stride};
    dot4(x, w, n, out + r);
  }
  for (; r < count; ++r) out[r] = dot(x, rows + r * stride, n);
}

// dot_rows for two x rows at once: eight independent accumulators keep the adder busy, and each weight row is
// loaded once for both.
STRATA_CPU_CLONES static void dot_rows_pair(const float* x0, const float* x1, const float* rows, int64_t stride,
                                            int64_t count, int64_t n, float* out0, float* out1) {
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) {
    const float* w0 = rows + r * stride;
    const float *w1 = w0 + stride, *w2 = w1 + stride, *w3 = w2 + stride;
    F8 a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
      const F8 u = load8(x0 + k), v = load8(x1 + k);
      const F8 m0 = load8(w0 + k), m1 = load8(w1 + k), m2 = load8(w2 + k), m3 = load8(w3 + k);
      a0 += u * m0;
      a1 += u * m1;
      a2 += u * m2;
      a3 += u * m3;
      b0 += v * m0;
      b1 += v * m1;
      b2 += v * m2;
      b3 += v * m3;
    }
    const float* const w[4] = {w0, w1, w2, w3};
    finish_dot4(a0, a1, a2, a3, x0, w, k, n, out0 + r);
    finish_dot4(b0, b1, b2, b3, x1, w, k, n, out1 + r);
  }
  if (r < count) {
    dot_rows(x0, rows + r * stride, stride, count - r, n, out0 + r);
    dot_rows(x1, rows + r * stride, stride, count - r, n, out1 + r);
  }
}

STRATA_CPU_CLONES void dot_many(const float* x, const float* const* rows, int64_t count, int64_t n, float* out) {
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) dot4(x, rows + r, n, out + r);
  for (; r < count; ++r) out[r] = dot(x, rows[r], n);
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
      int64_t i = 0;
      for (; i + 2 <= x.rows; i += 2)
        dot_rows_pair(x.row(i), x.row(i + 1), block, w.cols, r1 - r0, w.cols, y.row(i) + r0, y.row(i + 1) + r0);
      if (i < x.rows) dot_rows(x.row(i), block, w.cols, r1 - r0, w.cols, y.row(i) + r0);
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

std::vector<int32_t> top_k_entries(const std::vector<float>& score, int64_t k) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto n = std::min<int64_t>(k, static_cast<int64_t>(score.size()));
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  idx.resize(static_cast<size_t>(n));
  return idx;
}

}  // namespace strata::cpu
