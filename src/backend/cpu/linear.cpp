// CpuBackend's products: embed, linear, grouped_linear (the dot products: ops.cpp).
#include "backend/cpu/cpu_backend.h"

#include <algorithm>

#include "backend/cpu/official_numerics.h"
#include "backend/cpu/ops.h"

namespace strata::cpu {

using namespace model::v4;

Mat CpuBackend::embed(const WeightRef& table, const std::vector<int32_t>& tokens, int64_t copies) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), d = table.cols;
  Mat out(n, copies * d);
  for (int64_t s = 0; s < n; ++s) {
    table.row_f32(tokens[s], out.row(s));
    if (official_) official::round_bf16(out.row(s), d);  // DeepSeek's embedding is bf16; a quantized table rounds
    for (int64_t h = 1; h < copies; ++h) std::copy(out.row(s), out.row(s) + d, out.row(s) + h * d);
  }
  return out;
}

Mat CpuBackend::product(const Mat& x, const WeightRef& w) const {
  return official_ ? official::product(x, w) : cpu::linear(x, w);
}

Mat CpuBackend::linear(const Mat& x, const WeightRef& w) const { return product(x, w); }

Mat CpuBackend::grouped_linear(const Mat& x, const WeightRef& w, int64_t groups) const {
  const int64_t n = x.rows, group_in = x.cols / groups, rank = w.rows / groups;
  Mat grouped(n, groups * rank);
  for (int64_t g = 0; g < groups; ++g) {
    Mat xg(n, group_in);
    for (int64_t s = 0; s < n; ++s) std::copy(x.row(s) + g * group_in, x.row(s) + (g + 1) * group_in, xg.row(s));
    // DeepSeek's code converts wo_a (FP8 in the checkpoint) to bf16 and runs this as a bf16 einsum.
    const WeightRef wg = w.row_slice(g * rank, rank);
    const Mat yg = official_ ? official::bf16_product(xg, wg) : cpu::linear(xg, wg);
    for (int64_t s = 0; s < n; ++s) std::copy(yg.row(s), yg.row(s) + rank, grouped.row(s) + g * rank);
  }
  return grouped;
}

}  // namespace strata::cpu
