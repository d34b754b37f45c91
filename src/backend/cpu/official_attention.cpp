// CpuBackend's attention and Lightning Indexer in DeepSeek's numerics (official_numerics.h): its sparse_attn kernel
// and its index scores, step by step.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/official_numerics.h"
#include "backend/cpu/ops.h"

namespace strata::cpu {

using model::ModelConfig;
using namespace model::v4;
using official::round_bf16;

namespace {

// sparse_attn walks each query's key list in tiles of 64 with an online softmax; the tile boundaries matter
// because the probabilities are rounded to bf16 against the running maximum of the tiles so far.
constexpr int64_t kAttentionTile = 64;

// One query head over its key list (nullptr: a padding slot, index −1 in DeepSeek's lists): scores q·k × scale in
// fp32, per tile the running maximum and sum updated in fp32, the value rows weighted by the bf16-rounded
// probabilities; the sink adds exp(sink − max) to the denominator only; the result rounded to bf16.
void attend(const float* q, const std::vector<const float*>& keys, float sink, float scale, int64_t hd, float* out) {
  float running_max = -INFINITY, sum = 0.0f;
  std::vector<float> acc(static_cast<size_t>(hd), 0.0f), scores(static_cast<size_t>(kAttentionTile));
  const int64_t n = static_cast<int64_t>(keys.size());
  for (int64_t t0 = 0; t0 < n; t0 += kAttentionTile) {
    const int64_t t1 = std::min(n, t0 + kAttentionTile);
    float tile_max = running_max;
    for (int64_t j = t0; j < t1; ++j) {
      const float s = keys[j] ? dot(q, keys[j], hd) * scale : -INFINITY;
      scores[j - t0] = s;
      tile_max = std::max(tile_max, s);
    }
    if (tile_max == -INFINITY) continue;  // only padding so far: nothing to add, nothing to rescale
    const float rescale = std::exp(running_max - tile_max);  // 0 on the first tile with a key
    sum *= rescale;
    for (float& a : acc) a *= rescale;
    for (int64_t j = t0; j < t1; ++j) {
      if (!keys[j]) continue;
      const float p = std::exp(scores[j - t0] - tile_max);
      sum += p;
      const float pb = round_bf16(p);
      for (int64_t c = 0; c < hd; ++c) acc[c] += pb * keys[j][c];
    }
    running_max = tile_max;
  }
  sum += std::exp(sink - running_max);
  for (int64_t c = 0; c < hd; ++c) out[c] = round_bf16(acc[c] / sum);
}

}  // namespace

// The key list of each query is DeepSeek's index list: the window (oldest first), padded to the window's width,
// then the compressed entries — all of those closed (HCA), or the indexer's picks in score order (CSA) — padded to
// their width. A prompt prefilled from position 0 in one chunk has the widths of DeepSeek's prefill (the window
// min(chunk, window), the entries chunk / rate or min(top-k, chunk / rate)); any later row those of its decode
// (the whole window; every closed entry or min(top-k, closed entries)), which pad only a window not yet full.
Mat CpuBackend::official_attention(const Mat& q, const Mat& kv, const std::vector<float>& sinks,
                                   AttentionKeys keys_kind, const Picks& picks, const Step& step, int64_t layer,
                                   const ModelConfig& cfg) const {
  const int64_t n = q.rows, heads = cfg.num_attention_heads, hd = cfg.head_dim, window = cfg.sliding_window;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  Mat out(n, heads * hd);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t s = 0; s < n; ++s) {
    const int64_t seq = step.rows.sequence[s];
    const int64_t pos = step.rows.position[s], pos0 = step.rows.pos0[seq], first = step.rows.first[seq];
    const int64_t chunk = step.rows.count[seq];
    const bool prefill = pos0 == 0;
    const SequenceState& st = step.state(seq);
    const float* ring = st.swa(layer);
    const int64_t ring_rows = st.layout->window_rows;
    const CompressorLayout& comp = st.layer(layer).compressor;
    std::vector<const float*> keys;
    for (int64_t j = std::max<int64_t>(st.window_floor, pos - window + 1); j <= pos; ++j)
      keys.push_back(j >= pos0 ? kv.row(first + j - pos0) : ring + (j % ring_rows) * hd);
    keys.resize(static_cast<size_t>(prefill ? std::min(chunk, window) : window), nullptr);
    const size_t window_width = keys.size();
    if (keys_kind == AttentionKeys::WindowAndAllEntries) {
      const int64_t closed = comp.entries(pos + 1);
      for (int64_t e = 0; e < closed; ++e) keys.push_back(st.entry(comp, e));
      keys.resize(window_width + static_cast<size_t>(prefill ? chunk / comp.rate : closed), nullptr);
    } else if (keys_kind == AttentionKeys::WindowAndPicked) {
      for (int32_t e : picks[s]) keys.push_back(st.entry(comp, e));
      const int64_t closed = prefill ? chunk / comp.rate : comp.entries(pos + 1);
      keys.resize(window_width + static_cast<size_t>(std::min(cfg.index_topk, closed)), nullptr);
    }
    for (int64_t h = 0; h < heads; ++h) attend(q.row(s) + h * hd, keys, sinks[h], scale, hd, out.row(s) + h * hd);
  }
  return out;
}

// Index scores as DeepSeek computes them: each head's query rotated (Hadamard) and through FP4; the head weights
// weights_proj(x) × (head_dim · heads)^-½ in bf16; per entry each head's q·k rounded to bf16, ReLU, times its
// weight in bf16, the heads summed in fp32 and rounded to bf16. The top-k in descending score, ties to the lower
// entry (as CUDA's topk).
CpuBackend::Picks CpuBackend::official_indexer_topk(const Mat& q, const Mat& head_w, const Step& step, int64_t layer,
                                                    const ModelConfig& cfg) const {
  const int64_t n_heads = cfg.index_n_heads, hd = cfg.index_head_dim;
  const float weight_scale = static_cast<float>(std::pow(static_cast<double>(hd), -0.5) *
                                                std::pow(static_cast<double>(n_heads), -0.5));
  Picks picks(static_cast<size_t>(q.rows));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t s = 0; s < q.rows; ++s) {
    std::vector<float> qs(q.row(s), q.row(s) + n_heads * hd), w(static_cast<size_t>(n_heads));
    for (int64_t h = 0; h < n_heads; ++h) {
      official::hadamard_bf16(qs.data() + h * hd, hd);
      official::fake_fp4(qs.data() + h * hd, hd);
      w[h] = round_bf16(head_w.at(s, h) * weight_scale);
    }
    const int64_t pos = step.rows.position[s];
    const SequenceState& st = step.state(step.rows.sequence[s]);
    const CompressorLayout& ic = st.layer(layer).indexer;
    const int64_t visible = ic.entries(pos + 1);
    std::vector<float> score(static_cast<size_t>(visible));
    for (int64_t t = 0; t < visible; ++t) {
      float acc = 0.0f;
      for (int64_t h = 0; h < n_heads; ++h) {
        const float qk = round_bf16(dot(qs.data() + h * hd, st.entry(ic, t), hd));
        acc += round_bf16(std::max(qk, 0.0f) * w[h]);
      }
      score[t] = round_bf16(acc);
    }
    picks[s] = top_k_entries(score, cfg.index_topk);
  }
  return picks;
}

}  // namespace strata::cpu
