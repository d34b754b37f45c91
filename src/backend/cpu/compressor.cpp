// CpuBackend::compress: the compressor of CSA and HCA layers (paper §2.3.1, §2.3.2).
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/official_numerics.h"
#include "backend/cpu/ops.h"

namespace strata::cpu {

using namespace model::v4;

// Each channel's pooling weights are a softmax over the window's gate logits plus a learned position bias; CSA
// windows also include the previous window's first-half projections (width 2·rate, stride rate). Every token's raw
// projections go to the compressor's ring (position p in row p % ring_rows, state_layout.h), which still holds the
// previous window when the next one closes, and what a rollback keeps.
void CpuBackend::compress(const CompressorWeights& w, const Mat& kv, const Mat& gate, const Step& step, int64_t layer,
                          CompressorSlot slot, const RopeTable& rope, double eps) const {
  const int64_t rope_half = rope.half();
  for (int64_t c = 0; c < step.rows.chunks(); ++c) {
    SequenceState& st = step.state(c);
    const CompressorLayout& cl = st.layer(layer).of(slot == CompressorSlot::Indexer);
    const int64_t rate = cl.rate, dim = cl.dim, width = cl.width, rows = cl.ring_rows;
    float *ring_kv = st.ring_kv(cl), *ring_gate = st.ring_gate(cl);
    auto row_of = [&](int64_t position) { return (position % rows) * width; };
    const int64_t first_row = step.rows.first[c], pos0 = step.rows.pos0[c];
    for (int64_t s = first_row; s < first_row + step.rows.count[c]; ++s) {
      const int64_t pos = pos0 + (s - first_row);
      std::copy(kv.row(s), kv.row(s) + width, ring_kv + row_of(pos));
      std::copy(gate.row(s), gate.row(s) + width, ring_gate + row_of(pos));
      if ((pos + 1) % rate != 0) continue;

      const int64_t window = pos / rate, start = window * rate;
      if (st.keeps_entry(window, rate)) continue;  // restored by a bounded replay, which lacks its raw rows
      std::vector<float> entry(static_cast<size_t>(dim));
      std::vector<float> logits(static_cast<size_t>(2 * rate)), values(static_cast<size_t>(2 * rate));
      const int64_t own = w.overlap ? dim : 0;  // offset of the slice that feeds this window's own entry
      for (int64_t ch = 0; ch < dim; ++ch) {
        int64_t n = 0;
        if (w.overlap)
          for (int64_t j = 0; j < rate; ++j, ++n) {
            // The previous window's first half (+ its position bias); none before the first window.
            if (window == 0) {
              logits[n] = -INFINITY;
              values[n] = 0.0f;
            } else {
              const int64_t r = row_of(start - rate + j);
              logits[n] = ring_gate[r + ch] + w.ape[j * width + ch];
              values[n] = ring_kv[r + ch];
            }
          }
        for (int64_t j = 0; j < rate; ++j, ++n) {
          const int64_t r = row_of(start + j);
          logits[n] = ring_gate[r + own + ch] + w.ape[j * width + own + ch];
          values[n] = ring_kv[r + own + ch];
        }
        softmax(logits.data(), n);
        float acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += values[j] * logits[j];
        entry[ch] = acc;
      }
      if (official_) official::round_bf16(entry.data(), dim);  // DeepSeek: the fp32 pooling, then bf16
      rms_norm(entry.data(), dim, w.norm.data(), eps);
      if (official_) official::round_bf16(entry.data(), dim);
      // The entry's RoPE position is its window's first token.
      std::vector<float> cos(static_cast<size_t>(rope_half)), sin(static_cast<size_t>(rope_half));
      rope.cos_sin(start, cos.data(), sin.data());
      rope_interleaved(entry.data() + dim - 2 * rope_half, rope_half, cos.data(), sin.data(), false);
      if (official_) {
        // The stored form: the indexer's keys rotated and through FP4 (1×32), the attention's non-RoPE dims
        // through FP8 (1×64), as DeepSeek's Compressor leaves them.
        official::round_bf16(entry.data(), dim);
        if (slot == CompressorSlot::Indexer) {
          official::hadamard_bf16(entry.data(), dim);
          official::fake_fp4(entry.data(), dim);
        } else {
          official::fake_fp8(entry.data(), dim - 2 * rope_half, 64, kv_fp8_rounds_);
        }
      }
      float* dst = st.entry(cl, window);
      std::copy(entry.begin(), entry.end(), dst);
    }
  }
}

}  // namespace strata::cpu
