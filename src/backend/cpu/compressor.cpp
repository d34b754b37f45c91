// CpuBackend::compress: the compressor of CSA and HCA layers (paper §2.3.1, §2.3.2).
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"

namespace strata::cpu {

using namespace model::v4;

// Each channel's pooling weights are a softmax over the window's gate logits plus a learned position bias; CSA
// windows also include the previous window's first-half projections (width 2·rate, stride rate).
void CpuBackend::compress(const CompressorWeights& w, const Mat& kv, const Mat& gate, const Step& step, int64_t layer,
                          CompressorSlot slot, const RopeTable& rope, double eps) const {
  const int64_t rope_half = rope.half();
  for (int64_t c = 0; c < step.rows.chunks(); ++c) {
    LayerState& ls = step.layer_state(c, layer);
    CompressorState& st = slot == CompressorSlot::Attention ? ls.compressor : ls.indexer;
    const int64_t rate = st.rate, dim = st.dim, width = st.width;
    const int64_t first_row = step.rows.first[c];
    for (int64_t s = first_row; s < first_row + step.rows.count[c]; ++s) {
      std::copy(kv.row(s), kv.row(s) + width, st.pending_kv.begin() + st.n_pending * width);
      std::copy(gate.row(s), gate.row(s) + width, st.pending_gate.begin() + st.n_pending * width);
      if (++st.n_pending < rate) continue;

      std::vector<float> entry(static_cast<size_t>(dim));
      std::vector<float> logits(static_cast<size_t>(2 * rate)), values(static_cast<size_t>(2 * rate));
      const int64_t own = w.overlap ? dim : 0;  // offset of the slice that feeds this window's own entry
      for (int64_t ch = 0; ch < dim; ++ch) {
        int64_t n = 0;
        if (w.overlap)
          for (int64_t j = 0; j < rate; ++j, ++n) {
            logits[n] = st.has_overlap ? st.overlap_gate[j * dim + ch] : -INFINITY;
            values[n] = st.has_overlap ? st.overlap_kv[j * dim + ch] : 0.0f;
          }
        for (int64_t j = 0; j < rate; ++j, ++n) {
          logits[n] = st.pending_gate[j * width + own + ch] + w.ape[j * width + own + ch];
          values[n] = st.pending_kv[j * width + own + ch];
        }
        softmax(logits.data(), n);
        float acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += values[j] * logits[j];
        entry[ch] = acc;
      }
      if (w.overlap) {
        for (int64_t j = 0; j < rate; ++j)
          for (int64_t ch = 0; ch < dim; ++ch) {
            st.overlap_kv[j * dim + ch] = st.pending_kv[j * width + ch];
            st.overlap_gate[j * dim + ch] = st.pending_gate[j * width + ch] + w.ape[j * width + ch];
          }
        st.has_overlap = true;
      }
      rms_norm(entry.data(), dim, w.norm.data(), eps);
      // The entry's RoPE position is its window's first token.
      std::vector<float> cos(static_cast<size_t>(rope_half)), sin(static_cast<size_t>(rope_half));
      rope.cos_sin(st.n_entries * rate, cos.data(), sin.data());
      rope_interleaved(entry.data() + dim - 2 * rope_half, rope_half, cos.data(), sin.data(), false);
      st.append_entry(entry.data());
      st.n_pending = 0;
    }
  }
}

}  // namespace strata::cpu
