// CpuBackend's RMSNorm and RoPE ops, and each step's cos/sin rows of a RoPE table.
#include "backend/cpu/cpu_backend.h"

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

void CpuBackend::rms_norm_rows(Mat& x, const std::vector<float>* weight, double eps) const {
  cpu::rms_norm_rows(x, weight ? weight->data() : nullptr, eps);
}

void CpuBackend::head_rms_norm(Mat& x, int64_t head_dim, double eps) const {
  const int64_t heads = x.cols / head_dim;
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
}

}  // namespace strata::cpu
