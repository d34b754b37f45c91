// CpuBackend::indexer_topk: the Lightning Indexer's scores and each query's top-k entries.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"

namespace strata::cpu {

using model::ModelConfig;
using namespace model::v4;

CpuBackend::Picks CpuBackend::indexer_topk(const Mat& q, const Mat& head_w, const Step& step, int64_t layer,
                                           const ModelConfig& cfg) const {
  if (official_) return official_indexer_topk(q, head_w, step, layer, cfg);
  const int64_t n_heads = cfg.index_n_heads, hd = cfg.index_head_dim;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float weights_scale = 1.0f / std::sqrt(static_cast<float>(n_heads));
  Picks picks(static_cast<size_t>(q.rows));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t s = 0; s < q.rows; ++s) {
    const int64_t pos = step.rows.position[s];
    const SequenceState& st = step.state(step.rows.sequence[s]);
    const CompressorLayout& ic = st.layer(layer).indexer;
    const int64_t visible = ic.entries(pos + 1);
    std::vector<float> score(static_cast<size_t>(visible), 0.0f);
    for (int64_t t = 0; t < visible; ++t) {
      float acc = 0;
      for (int64_t h = 0; h < n_heads; ++h) {
        const float qk = dot(q.row(s) + h * hd, st.entry(ic, t), hd);
        acc += (std::max(qk, 0.0f) * softmax_scale) * (head_w.at(s, h) * weights_scale);
      }
      score[t] = acc;
    }
    picks[s] = top_k_entries(score, cfg.index_topk);
  }
  return picks;
}

}  // namespace strata::cpu
