// CpuBackend's RMSNorm and RoPE ops, and each step's cos/sin rows of a RoPE table.
#include "backend/cpu/cpu_backend.h"

#include <cmath>

#include "backend/cpu/official_numerics.h"
#include "backend/cpu/ops.h"

namespace strata::cpu {

using namespace model::v4;

const std::vector<float>& CpuBackend::cos_sin(const RopeTable& table, const Step& step, bool want_sin) {
  auto it = rope_rows_.find(&table);
  if (it == rope_rows_.end()) {
    const int64_t n = step.rows.rows(), half = table.half();
    std::vector<float> c(static_cast<size_t>(n * half)), s(c.size());
    for (int64_t r = 0; r < n; ++r) table.cos_sin(step.rows.position[r], c.data() + r * half, s.data() + r * half);
    it = rope_rows_.emplace(&table, std::make_pair(std::move(c), std::move(s))).first;
  }
  return want_sin ? it->second.second : it->second.first;
}

// Official numerics: fp32 inside (weight · (x · rsqrt(mean(x²) + eps))), the result rounded to bf16.
void CpuBackend::rms_norm_rows(Mat& x, const std::vector<float>* weight, double eps) const {
  cpu::rms_norm_rows(x, weight ? weight->data() : nullptr, eps);
  if (official_) official::round_bf16(x);
}

namespace {

// DeepSeek's per-head query norm, `q *= rsqrt(q.square().mean(-1) + eps)` on a bf16 tensor: every step rounds to
// bf16 (the squares, their fp32-summed mean, the sum with eps, its rsqrt, the product).
void bf16_head_norm(float* x, int64_t n, double eps) {
  using official::round_bf16;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += round_bf16(x[i] * x[i]);
  const float mean = round_bf16(sum / static_cast<float>(n));
  const float r = round_bf16(1.0f / std::sqrt(round_bf16(mean + static_cast<float>(eps))));
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i] * r);
}

}  // namespace

void CpuBackend::head_rms_norm(Mat& x, int64_t head_dim, double eps) const {
  const int64_t heads = x.cols / head_dim;
  if (official_) {
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < x.rows; ++s)
      for (int64_t h = 0; h < heads; ++h) bf16_head_norm(x.row(s) + h * head_dim, head_dim, eps);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < x.rows; ++s)
    for (int64_t h = 0; h < heads; ++h) rms_norm(x.row(s) + h * head_dim, head_dim, nullptr, eps);
}

void CpuBackend::rope(Mat& x, int64_t head_dim, const RopeTable& table, const Step& step, bool inverse) {
  const int64_t heads = x.cols / head_dim, half = table.half(), nope = head_dim - 2 * half;
  const std::vector<float>& cos = cos_sin(table, step, false);
  const std::vector<float>& sin = cos_sin(table, step, true);
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < x.rows; ++s)
    for (int64_t h = 0; h < heads; ++h)
      rope_interleaved(x.row(s) + h * head_dim + nope, half, cos.data() + s * half, sin.data() + s * half, inverse);
  if (official_) official::round_bf16(x);  // DeepSeek rotates in fp32 and writes back into the bf16 tensor
}

void CpuBackend::quantize_kv_rows(Mat& kv, int64_t rope_dims) const {
  if (!official_) return;
  constexpr int64_t kBlock = 64;  // act_quant(kv[..., :-rope_dims], 64, ...) in DeepSeek's attention
  for (int64_t r = 0; r < kv.rows; ++r) official::fake_fp8(kv.row(r), kv.cols - rope_dims, kBlock, kv_fp8_rounds_);
}

}  // namespace strata::cpu
