// CpuBackend's attention: shared-KV MQA with sinks over each row's keys, and the sliding-window ring.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"

namespace strata::cpu {

using model::ModelConfig;
using namespace model::v4;

Mat CpuBackend::sparse_attention(const Mat& q, const Mat& kv, const std::vector<float>& sinks, AttentionKeys keys_kind,
                                 const Picks& picks, const Step& step, int64_t layer, const ModelConfig& cfg) const {
  if (official_) return official_attention(q, kv, sinks, keys_kind, picks, step, layer, cfg);
  const int64_t n = q.rows, heads = cfg.num_attention_heads, hd = cfg.head_dim, window = cfg.sliding_window;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Mat out(n, heads * hd);
#pragma omp parallel
  {
    std::vector<const float*> keys;  // the keys of query row keys_of, shared by its heads
    std::vector<float> logits;
    int64_t keys_of = -1;
#pragma omp for collapse(2) schedule(dynamic, 4)
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t h = 0; h < heads; ++h) {
        if (keys_of != s) {
          const int64_t seq = step.rows.sequence[s];
          const int64_t pos = step.rows.position[s], pos0 = step.rows.pos0[seq], first = step.rows.first[seq];
          const SequenceState& st = step.state(seq);
          const float* ring = st.swa(layer);
          const int64_t ring_rows = st.layout->window_rows;
          const CompressorLayout& comp = st.layer(layer).compressor;
          keys.clear();
          // A bounded replay's rings hold nothing below its window floor (sequence_state.h).
          for (int64_t j = std::max<int64_t>(st.window_floor, pos - window + 1); j <= pos; ++j)
            keys.push_back(j >= pos0 ? kv.row(first + j - pos0) : ring + (j % ring_rows) * hd);
          if (keys_kind == AttentionKeys::WindowAndPicked) {
            for (int32_t e : picks[s]) keys.push_back(st.entry(comp, e));
          } else if (keys_kind == AttentionKeys::WindowAndAllEntries) {
            // Every window closed at or before this row's position (the step's compressor ran before attention).
            for (int64_t e = 0; e < comp.entries(pos + 1); ++e) keys.push_back(st.entry(comp, e));
          }
          logits.resize(keys.size() + 1);
          keys_of = s;
        }
        const int64_t nk = static_cast<int64_t>(keys.size());
        dot_many(q.row(s) + h * hd, keys.data(), nk, hd, logits.data());
        for (int64_t j = 0; j < nk; ++j) logits[j] *= scale;
        logits[nk] = sinks[h];  // the sink takes probability mass but contributes no value
        softmax(logits.data(), nk + 1);
        accumulate_rows(out.row(s) + h * hd, logits.data(), keys.data(), nk, hd);
      }
    }
  }
  return out;
}

// The ring keeps window + max_rollback - 1 positions (state_layout.h), so the tokens a rollback drops overwrite
// none that the kept prefix's window needs. A chunk longer than the ring writes only its last ring-full.
void CpuBackend::update_window(const Mat& kv, const Step& step, int64_t layer, int64_t) const {
  const int64_t hd = kv.cols;
  for (int64_t c = 0; c < step.rows.chunks(); ++c) {
    const int64_t first = step.rows.first[c], count = step.rows.count[c];
    const SequenceState& st = step.state(c);
    const int64_t rows = st.layout->window_rows;
    float* ring = st.swa(layer);
    for (int64_t s = std::max<int64_t>(0, count - rows); s < count; ++s)
      std::copy(kv.row(first + s), kv.row(first + s) + hd, ring + ((step.rows.pos0[c] + s) % rows) * hd);
  }
}

}  // namespace strata::cpu
