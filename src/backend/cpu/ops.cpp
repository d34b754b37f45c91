#include "backend/cpu/ops.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace strata::cpu {

float dot(const float* a, const float* b, int64_t n) {
  // Eight independent accumulators let the compiler vectorise without -ffast-math.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; k < n; ++k) s += a[k] * b[k];
  return s;
}

Mat linear(const Mat& x, const WeightRef& w) {
  Mat y(x.rows, w.rows);
  // Blocks of output rows: each block's weights are converted to fp32 once and reused for every token. Aligned
  // fp32 weights (e.g. a dequantized head) are read where they are: copying them would only add memory traffic.
  const bool fp32_in_place = w.dtype == DType::F32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
  constexpr int64_t kBlock = 8;
  const int64_t nblocks = (w.rows + kBlock - 1) / kBlock;
#pragma omp parallel
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
      for (int64_t i = 0; i < x.rows; ++i) {
        const float* xi = x.row(i);
        float* yi = y.row(i);
        for (int64_t r = r0; r < r1; ++r) yi[r] = dot(xi, block + (r - r0) * w.cols, w.cols);
      }
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
