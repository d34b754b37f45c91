// CpuBackend's mHC ops (paper §2.2, eq. 8): hc_pre, hc_post and the HyperHead.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>

#include "backend/cpu/official_numerics.h"
#include "backend/cpu/ops.h"

namespace strata::cpu {

using model::ModelConfig;
using namespace model::v4;

namespace {

// The mixing logits of one row's streams: the reference normalises the streams first (RMSNorm over all hc·d),
// DeepSeek's code multiplies the logits by the rsqrt afterwards, (x · fnᵀ) · rsqrt(mean(x²) + eps).
void mixes_of(const float* streams, const float* fn, int64_t width, int64_t count, double eps, bool official,
              float* flat, float* mix) {
  std::copy(streams, streams + width, flat);
  if (!official) {
    rms_norm(flat, width, nullptr, eps);
    dot_rows(flat, fn, width, count, width, mix);
    return;
  }
  const float r = 1.0f / std::sqrt(dot(flat, flat, width) / static_cast<float>(width) + static_cast<float>(eps));
  dot_rows(flat, fn, width, count, width, mix);
  for (int64_t i = 0; i < count; ++i) mix[i] *= r;
}

}  // namespace

CpuBackend::Mix CpuBackend::hc_pre(const HyperConnectionWeights& w, const Mat& streams, Mat& collapsed,
                                   const ModelConfig& cfg) const {
  const int64_t hc = cfg.hc_mult, d = cfg.hidden_size, n = streams.rows, mix_n = (2 + hc) * hc;
  const float eps = static_cast<float>(cfg.hc_eps);
  Mix m;
  m.hc = hc;
  m.post.resize(static_cast<size_t>(n * hc));
  m.comb.resize(static_cast<size_t>(n * hc * hc));
  collapsed = Mat(n, d);
#pragma omp parallel
  {
    std::vector<float> flat(static_cast<size_t>(hc * d)), mix(static_cast<size_t>(mix_n)), pre(static_cast<size_t>(hc));
    std::vector<const float*> stream_rows(static_cast<size_t>(hc));
#pragma omp for schedule(static)
    for (int64_t s = 0; s < n; ++s) {
      mixes_of(streams.row(s), w.fn.data(), hc * d, mix_n, cfg.rms_norm_eps, official_, flat.data(), mix.data());
      for (int64_t h = 0; h < hc; ++h) {
        pre[h] = sigmoid(mix[h] * w.scale[0] + w.base[h]) + eps;
        m.post[s * hc + h] = 2.0f * sigmoid(mix[hc + h] * w.scale[1] + w.base[hc + h]);
      }
      float* comb = m.comb.data() + s * hc * hc;
      for (int64_t i = 0; i < hc * hc; ++i) comb[i] = mix[2 * hc + i] * w.scale[2] + w.base[2 * hc + i];
      for (int64_t i = 0; i < hc; ++i) {
        softmax(comb + i * hc, hc);
        for (int64_t j = 0; j < hc; ++j) comb[i * hc + j] += eps;
      }
      sinkhorn(comb, hc, cfg.hc_sinkhorn_iters, eps);
      // collapsed[k] = Σ_h pre[h] · stream h [k], h in order from 0
      for (int64_t h = 0; h < hc; ++h) stream_rows[h] = streams.row(s) + h * d;
      accumulate_rows(collapsed.row(s), pre.data(), stream_rows.data(), hc, d);
    }
  }
  if (official_) official::round_bf16(collapsed);  // DeepSeek: Σ pre · x in fp32, then the bf16 block input
  return m;
}

void CpuBackend::hc_post(const Mix& m, const Mat& block_out, Mat& streams) const {
  const int64_t hc = m.hc, d = block_out.cols;
#pragma omp parallel
  {
    std::vector<float> old(static_cast<size_t>(hc * d)), mixed(static_cast<size_t>(d)), column(static_cast<size_t>(hc));
    std::vector<const float*> old_rows(static_cast<size_t>(hc));
    for (int64_t j = 0; j < hc; ++j) old_rows[j] = old.data() + j * d;
#pragma omp for schedule(static)
    for (int64_t s = 0; s < streams.rows; ++s) {
      float* x = streams.row(s);
      std::copy(x, x + hc * d, old.begin());
      const float* comb = m.comb.data() + s * hc * hc;
      const float* out = block_out.row(s);
      for (int64_t k = 0; k < hc; ++k) {
        // mixed[e] = Σ_j comb[j][k] · old[j][e], j in order from 0
        for (int64_t j = 0; j < hc; ++j) column[j] = comb[j * hc + k];
        std::fill(mixed.begin(), mixed.end(), 0.0f);
        accumulate_rows(mixed.data(), column.data(), old_rows.data(), hc, d);
        const float post = m.post[s * hc + k];
        for (int64_t e = 0; e < d; ++e) x[k * d + e] = post * out[e] + mixed[e];
      }
      if (official_) official::round_bf16(x, hc * d);  // the residual streams are bf16 in DeepSeek's code
    }
  }
}

Mat CpuBackend::hyper_head(const ModelWeights& w, const Mat& streams, const std::vector<int64_t>& rows,
                           const ModelConfig& cfg) const {
  return hyper_head(w.hc_head_fn, w.hc_head_base, w.hc_head_scale, streams, rows, cfg);
}

Mat CpuBackend::hyper_head(const std::vector<float>& fn, const std::vector<float>& base,
                           const std::vector<float>& scale, const Mat& streams, const std::vector<int64_t>& rows,
                           const ModelConfig& cfg) const {
  const int64_t hc = cfg.hc_mult, d = cfg.hidden_size;
  Mat y(static_cast<int64_t>(rows.size()), d);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t s = rows[r];
    std::vector<float> flat(static_cast<size_t>(hc * d)), mix(static_cast<size_t>(hc));
    mixes_of(streams.row(s), fn.data(), hc * d, hc, cfg.rms_norm_eps, official_, flat.data(), mix.data());
    float* out = y.row(static_cast<int64_t>(r));
    for (int64_t h = 0; h < hc; ++h) {
      const float pre = sigmoid(mix[h] * scale[0] + base[h]) + static_cast<float>(cfg.hc_eps);
      for (int64_t c = 0; c < d; ++c) out[c] += pre * streams.at(s, h * d + c);
    }
  }
  if (official_) official::round_bf16(y);
  return y;
}

Mat CpuBackend::join_streams(const Mat& per_stream, const Mat& shared, int64_t hc) const {
  const int64_t d = shared.cols;
  Mat out(shared.rows, hc * d);
  for (int64_t r = 0; r < shared.rows; ++r)
    for (int64_t k = 0; k < hc; ++k)
      for (int64_t j = 0; j < d; ++j) out.at(r, k * d + j) = per_stream.at(r * hc + k, j) + shared.at(r, j);
  if (official_) official::round_bf16(out);  // e_proj(e) + h_proj(h): a sum of two bf16 tensors
  return out;
}

}  // namespace strata::cpu
