#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace strata::cpu {

using model::ModelConfig;
using model::ScoringFunc;
using namespace model::v4;

namespace {

// Every step allocates and frees the same temporaries (a few MB at batch 256). glibc's default keeps adjusting its
// thresholds so that it hands the top of the heap back to the kernel after a step, and the next step page-faults
// it in again: 10-20% of a tiny model's step. Once a CPU forward runs, the process keeps what it freed (up to
// 128 MiB) and serves blocks below 32 MiB (glibc's own ceiling for its adaptive threshold) from the heap.
void keep_freed_memory() {
#if defined(__GLIBC__)
  static const bool once = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
    return true;
  }();
  (void)once;
#endif
}

}  // namespace

void CpuBackend::begin_step(const Step&) {
  keep_freed_memory();
  rope_rows_.clear();
}

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

Mat CpuBackend::embed(const WeightRef& table, const std::vector<int32_t>& tokens, int64_t copies) const {
  const int64_t n = static_cast<int64_t>(tokens.size()), d = table.cols;
  Mat out(n, copies * d);
  for (int64_t s = 0; s < n; ++s) {
    table.row_f32(tokens[s], out.row(s));
    for (int64_t h = 1; h < copies; ++h) std::copy(out.row(s), out.row(s) + d, out.row(s) + h * d);
  }
  return out;
}

Mat CpuBackend::linear(const Mat& x, const WeightRef& w) const { return cpu::linear(x, w); }

Mat CpuBackend::grouped_linear(const Mat& x, const WeightRef& w, int64_t groups) const {
  const int64_t n = x.rows, group_in = x.cols / groups, rank = w.rows / groups;
  Mat grouped(n, groups * rank);
  for (int64_t g = 0; g < groups; ++g) {
    Mat xg(n, group_in);
    for (int64_t s = 0; s < n; ++s) std::copy(x.row(s) + g * group_in, x.row(s) + (g + 1) * group_in, xg.row(s));
    const Mat yg = cpu::linear(xg, w.row_slice(g * rank, rank));
    for (int64_t s = 0; s < n; ++s) std::copy(yg.row(s), yg.row(s) + rank, grouped.row(s) + g * rank);
  }
  return grouped;
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
      std::copy(streams.row(s), streams.row(s) + hc * d, flat.begin());
      rms_norm(flat.data(), hc * d, nullptr, cfg.rms_norm_eps);
      dot_rows(flat.data(), w.fn.data(), hc * d, mix_n, hc * d, mix.data());
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
    }
  }
}

Mat CpuBackend::hyper_head(const ModelWeights& w, const Mat& streams, const std::vector<int64_t>& rows,
                           const ModelConfig& cfg) const {
  const int64_t hc = cfg.hc_mult, d = cfg.hidden_size;
  Mat y(static_cast<int64_t>(rows.size()), d);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t s = rows[r];
    std::vector<float> flat(streams.row(s), streams.row(s) + hc * d);
    rms_norm(flat.data(), hc * d, nullptr, cfg.rms_norm_eps);
    float* out = y.row(static_cast<int64_t>(r));
    std::vector<float> mix(static_cast<size_t>(hc));
    dot_rows(flat.data(), w.hc_head_fn.data(), hc * d, hc, hc * d, mix.data());
    for (int64_t h = 0; h < hc; ++h) {
      const float pre = sigmoid(mix[h] * w.hc_head_scale[0] + w.hc_head_base[h]) + static_cast<float>(cfg.hc_eps);
      for (int64_t c = 0; c < d; ++c) out[c] += pre * streams.at(s, h * d + c);
    }
  }
  return y;
}

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

CpuBackend::Picks CpuBackend::indexer_topk(const Mat& q, const Mat& head_w, const Step& step, int64_t layer,
                                           const ModelConfig& cfg) const {
  const int64_t n_heads = cfg.index_n_heads, hd = cfg.index_head_dim;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float weights_scale = 1.0f / std::sqrt(static_cast<float>(n_heads));
  Picks picks(static_cast<size_t>(q.rows));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t s = 0; s < q.rows; ++s) {
    const int64_t pos = step.rows.position[s];
    const CompressorState& st = step.layer_state(step.rows.sequence[s], layer).indexer;
    const int64_t visible = std::min((pos + 1) / st.rate, st.n_entries);
    std::vector<float> score(static_cast<size_t>(visible), 0.0f);
    for (int64_t t = 0; t < visible; ++t) {
      float acc = 0;
      for (int64_t h = 0; h < n_heads; ++h) {
        const float qk = dot(q.row(s) + h * hd, st.entry(t), hd);
        acc += (std::max(qk, 0.0f) * softmax_scale) * (head_w.at(s, h) * weights_scale);
      }
      score[t] = acc;
    }
    std::vector<int32_t> idx(static_cast<size_t>(visible));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(cfg.index_topk, visible);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    idx.resize(static_cast<size_t>(k));
    picks[s] = std::move(idx);
  }
  return picks;
}

Mat CpuBackend::sparse_attention(const Mat& q, const Mat& kv, const std::vector<float>& sinks, AttentionKeys keys_kind,
                                 const Picks& picks, const Step& step, int64_t layer, const ModelConfig& cfg) const {
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
          const LayerState& st = step.layer_state(seq, layer);
          keys.clear();
          for (int64_t j = std::max<int64_t>(0, pos - window + 1); j <= pos; ++j)
            keys.push_back(j >= pos0 ? kv.row(first + j - pos0) : st.swa.data() + (j % window) * hd);
          if (keys_kind == AttentionKeys::WindowAndPicked) {
            for (int32_t e : picks[s]) keys.push_back(st.compressor.entry(e));
          } else if (keys_kind == AttentionKeys::WindowAndAllEntries) {
            const int64_t visible = std::min((pos + 1) / st.compressor.rate, st.compressor.n_entries);
            for (int64_t e = 0; e < visible; ++e) keys.push_back(st.compressor.entry(e));
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

void CpuBackend::update_window(const Mat& kv, const Step& step, int64_t layer, int64_t window) const {
  const int64_t hd = kv.cols;
  for (int64_t c = 0; c < step.rows.chunks(); ++c) {
    const int64_t first = step.rows.first[c], count = step.rows.count[c];
    std::vector<float>& swa = step.layer_state(c, layer).swa;
    for (int64_t s = std::max<int64_t>(0, count - window); s < count; ++s)
      std::copy(kv.row(first + s), kv.row(first + s) + hd, swa.begin() + ((step.rows.pos0[c] + s) % window) * hd);
  }
}

Mat CpuBackend::expert(const ExpertWeights& w, const Mat& x, double limit_d) const {
  Mat g = cpu::linear(x, w.w1);
  const Mat u = cpu::linear(x, w.w3);
  const float limit = static_cast<float>(limit_d);
  for (size_t i = 0; i < g.v.size(); ++i) g.v[i] = silu(std::min(g.v[i], limit)) * std::clamp(u.v[i], -limit, limit);
  return cpu::linear(g, w.w2);
}

CpuBackend::Routing CpuBackend::route(Mat scores, const MoeWeights& w, const std::vector<int32_t>& tokens,
                                      const ModelConfig& cfg) const {
  const int64_t n = scores.rows, n_experts = cfg.n_routed_experts, k = cfg.num_experts_per_tok;
  for (int64_t s = 0; s < n; ++s) {
    float* r = scores.row(s);
    switch (cfg.scoring_func) {
      case ScoringFunc::SqrtSoftplus:
        for (int64_t e = 0; e < n_experts; ++e) r[e] = std::sqrt(softplus(r[e]));
        break;
      case ScoringFunc::Sigmoid:
        for (int64_t e = 0; e < n_experts; ++e) r[e] = sigmoid(r[e]);
        break;
      case ScoringFunc::Softmax:
        softmax(r, n_experts);
        break;
    }
  }
  Routing routed_to(static_cast<size_t>(n_experts));
  for (int64_t s = 0; s < n; ++s) {
    const float* r = scores.row(s);
    std::vector<int32_t> chosen(static_cast<size_t>(k));
    if (!w.tid2eid.empty()) {
      for (int64_t j = 0; j < k; ++j) chosen[j] = w.tid2eid[static_cast<size_t>(tokens[s] * k + j)];
    } else {
      std::vector<int32_t> idx(static_cast<size_t>(n_experts));
      std::iota(idx.begin(), idx.end(), 0);
      auto biased = [&](int32_t e) { return r[e] + (w.gate_bias.empty() ? 0.0f : w.gate_bias[e]); };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return biased(a) > biased(b) || (biased(a) == biased(b) && a < b);
      });
      std::copy(idx.begin(), idx.begin() + k, chosen.begin());
    }
    float sum = 0;
    for (int32_t e : chosen) sum += r[e];
    for (int32_t e : chosen)
      routed_to[e].emplace_back(s, r[e] / (sum + 1e-20f) * static_cast<float>(cfg.routed_scaling_factor));
  }
  return routed_to;
}

Mat CpuBackend::experts(const Mat& x, const Routing& routing, const MoeWeights& w, const ModelConfig& cfg) const {
  const int64_t n = x.rows, d = x.cols;
  Mat out = w.shared ? expert(*w.shared, x, cfg.swiglu_limit) : Mat(n, d);
  Mat routed(n, d);
  routed_experts_.push_back(
      std::count_if(routing.begin(), routing.end(), [](const auto& rows) { return !rows.empty(); }));
  for (size_t e = 0; e < routing.size(); ++e) {
    const auto& rows = routing[e];
    if (rows.empty()) continue;
    Mat xe(static_cast<int64_t>(rows.size()), d);
    for (size_t i = 0; i < rows.size(); ++i) std::copy(x.row(rows[i].first), x.row(rows[i].first) + d, xe.row(i));
    const Mat ye = expert(w.experts[e], xe, cfg.swiglu_limit);
    for (size_t i = 0; i < rows.size(); ++i) {
      float* dst = routed.row(rows[i].first);
      for (int64_t c = 0; c < d; ++c) dst[c] += ye.at(i, c) * rows[i].second;
    }
  }
  for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = routed.v[i] + out.v[i];
  return out;
}

}  // namespace strata::cpu
