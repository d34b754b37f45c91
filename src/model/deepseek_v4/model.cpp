#include "model/deepseek_v4/model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/ops.h"
#include "core/error.h"

namespace strata::model::v4 {

using cpu::dot;
using cpu::linear;
using cpu::rms_norm;
using cpu::rms_norm_rows;

struct Model::HcMix {
  int64_t hc = 0;
  std::vector<float> post;  // [tokens, hc]       where each stream receives the block output (range [0, 2])
  std::vector<float> comb;  // [tokens, hc, hc]   doubly-stochastic stream mixer, comb[j][k]: stream j → k
};

struct Model::Rows {
  std::vector<int64_t> position;  // absolute position of each row
  std::vector<int64_t> sequence;  // index into the chunks of each row
  std::vector<int64_t> first;     // first row of each chunk
  std::vector<int64_t> pos0;      // position of each chunk's first row
};

Model::Model(ModelConfig config, ModelWeights weights)
    : cfg_(std::move(config)),
      w_(std::move(weights)),
      rope_main_(make_rope_table(cfg_.rope_main, cfg_.head_dim)),
      rope_compress_(make_rope_table(cfg_.rope_compress, cfg_.head_dim)) {}

static CompressorState make_compressor_state(int64_t rate, int64_t dim, bool overlap, EntryPageArena* arena) {
  CompressorState s;
  s.arena = arena;
  s.rate = rate;
  s.dim = dim;
  s.width = overlap ? 2 * dim : dim;
  s.pending_kv.assign(static_cast<size_t>(rate * s.width), 0.0f);
  s.pending_gate.assign(static_cast<size_t>(rate * s.width), 0.0f);
  if (overlap) {
    s.overlap_kv.assign(static_cast<size_t>(rate * dim), 0.0f);
    s.overlap_gate.assign(static_cast<size_t>(rate * dim), 0.0f);
  }
  return s;
}

SequenceState Model::new_sequence(EntryPageArena* arena) const {
  SequenceState s;
  if (!arena) {
    s.own_arena = std::make_unique<EntryPageArena>();
    arena = s.own_arena.get();
  }
  const int64_t largest = std::max(cfg_.head_dim, cfg_.index_head_dim);
  if (arena->page_floats() < largest)
    fail("state pages of ", arena->page_floats(), " floats cannot hold one ", largest, "-wide compressed entry");
  s.layers.resize(static_cast<size_t>(cfg_.num_hidden_layers));
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    LayerState& ls = s.layers[l];
    ls.swa.assign(static_cast<size_t>(cfg_.sliding_window * cfg_.head_dim), 0.0f);
    const AttentionWeights& a = w_.layers[l].attn;
    if (a.compressor)
      ls.compressor = make_compressor_state(a.compressor->rate, a.compressor->dim, a.compressor->overlap, arena);
    if (a.indexer)
      ls.indexer = make_compressor_state(a.indexer->compressor.rate, a.indexer->compressor.dim,
                                         a.indexer->compressor.overlap, arena);
  }
  return s;
}

// mHC (paper §2.2, eq. 8): from the hc parallel residual streams, derive `pre` (collapse weights), `post`
// (placement of the block output) and `comb` (stream mixer, projected onto doubly-stochastic matrices by
// Sinkhorn-Knopp), and collapse the streams into the block input.
Model::HcMix Model::hc_pre(const HyperConnectionWeights& w, const Mat& streams, Mat& collapsed) const {
  const int64_t hc = cfg_.hc_mult, d = cfg_.hidden_size, n = streams.rows, mix_n = (2 + hc) * hc;
  const float eps = static_cast<float>(cfg_.hc_eps);
  HcMix m;
  m.hc = hc;
  m.post.resize(static_cast<size_t>(n * hc));
  m.comb.resize(static_cast<size_t>(n * hc * hc));
  collapsed = Mat(n, d);
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < n; ++s) {
    std::vector<float> flat(streams.row(s), streams.row(s) + hc * d);
    rms_norm(flat.data(), hc * d, nullptr, cfg_.rms_norm_eps);
    std::vector<float> mix(static_cast<size_t>(mix_n));
    for (int64_t i = 0; i < mix_n; ++i) mix[i] = dot(w.fn.data() + i * hc * d, flat.data(), hc * d);
    std::vector<float> pre(static_cast<size_t>(hc));
    for (int64_t h = 0; h < hc; ++h) {
      pre[h] = cpu::sigmoid(mix[h] * w.scale[0] + w.base[h]) + eps;
      m.post[s * hc + h] = 2.0f * cpu::sigmoid(mix[hc + h] * w.scale[1] + w.base[hc + h]);
    }
    float* comb = m.comb.data() + s * hc * hc;
    for (int64_t i = 0; i < hc * hc; ++i) comb[i] = mix[2 * hc + i] * w.scale[2] + w.base[2 * hc + i];
    for (int64_t i = 0; i < hc; ++i) {
      cpu::softmax(comb + i * hc, hc);
      for (int64_t j = 0; j < hc; ++j) comb[i * hc + j] += eps;
    }
    auto normalize_columns = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0;
        for (int64_t i = 0; i < hc; ++i) sum += comb[i * hc + j];
        for (int64_t i = 0; i < hc; ++i) comb[i * hc + j] /= sum + eps;
      }
    };
    auto normalize_rows = [&] {
      for (int64_t i = 0; i < hc; ++i) {
        float sum = 0;
        for (int64_t j = 0; j < hc; ++j) sum += comb[i * hc + j];
        for (int64_t j = 0; j < hc; ++j) comb[i * hc + j] /= sum + eps;
      }
    };
    normalize_columns();
    for (int64_t it = 0; it + 1 < cfg_.hc_sinkhorn_iters; ++it) {
      normalize_rows();
      normalize_columns();
    }
    float* out = collapsed.row(s);
    const float* x = streams.row(s);
    for (int64_t k = 0; k < d; ++k) {
      float acc = 0;
      for (int64_t h = 0; h < hc; ++h) acc += pre[h] * x[h * d + k];
      out[k] = acc;
    }
  }
  return m;
}

// streams[k] ← post[k] · block_out + Σ_j comb[j][k] · streams[j]
void Model::hc_post(const HcMix& m, const Mat& block_out, Mat& streams) const {
  const int64_t hc = m.hc, d = cfg_.hidden_size;
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < streams.rows; ++s) {
    const std::vector<float> old(streams.row(s), streams.row(s) + hc * d);
    const float* comb = m.comb.data() + s * hc * hc;
    float* x = streams.row(s);
    for (int64_t k = 0; k < hc; ++k) {
      const float post = m.post[s * hc + k];
      for (int64_t e = 0; e < d; ++e) {
        float acc = 0;
        for (int64_t j = 0; j < hc; ++j) acc += comb[j * hc + k] * old[j * d + e];
        x[k * d + e] = post * block_out.at(s, e) + acc;
      }
    }
  }
}

// Gated pooling of every `rate` tokens into one entry (paper §2.3.1 eqs. 9–12 with overlap, §2.3.2 eqs. 20–23).
// Each channel's pooling weights are a softmax over the window's gate logits plus a learned position bias; CSA
// windows also include the previous window's first-half projections (width 2·rate, stride rate).
void Model::compress(const CompressorWeights& w, const Mat& kv, const Mat& gate, int64_t first_row, int64_t n_rows,
                     CompressorState& st) const {
  const int64_t rate = st.rate, dim = st.dim, width = st.width;
  const int64_t rope_half = rope_compress_.half();
  for (int64_t s = first_row; s < first_row + n_rows; ++s) {
    std::copy(kv.row(s), kv.row(s) + width, st.pending_kv.begin() + st.n_pending * width);
    std::copy(gate.row(s), gate.row(s) + width, st.pending_gate.begin() + st.n_pending * width);
    if (++st.n_pending < rate) continue;

    std::vector<float> entry(static_cast<size_t>(dim));
    std::vector<float> logits(static_cast<size_t>(2 * rate)), values(static_cast<size_t>(2 * rate));
    const int64_t own = w.overlap ? dim : 0;  // offset of the slice that feeds this window's own entry
    for (int64_t c = 0; c < dim; ++c) {
      int64_t n = 0;
      if (w.overlap)
        for (int64_t j = 0; j < rate; ++j, ++n) {
          logits[n] = st.has_overlap ? st.overlap_gate[j * dim + c] : -INFINITY;
          values[n] = st.has_overlap ? st.overlap_kv[j * dim + c] : 0.0f;
        }
      for (int64_t j = 0; j < rate; ++j, ++n) {
        logits[n] = st.pending_gate[j * width + own + c] + w.ape[j * width + own + c];
        values[n] = st.pending_kv[j * width + own + c];
      }
      cpu::softmax(logits.data(), n);
      float acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += values[j] * logits[j];
      entry[c] = acc;
    }
    if (w.overlap) {
      for (int64_t j = 0; j < rate; ++j)
        for (int64_t c = 0; c < dim; ++c) {
          st.overlap_kv[j * dim + c] = st.pending_kv[j * width + c];
          st.overlap_gate[j * dim + c] = st.pending_gate[j * width + c] + w.ape[j * width + c];
        }
      st.has_overlap = true;
    }
    rms_norm(entry.data(), dim, w.norm.data(), cfg_.rms_norm_eps);
    // The entry's RoPE position is its window's first token.
    std::vector<float> cos(static_cast<size_t>(rope_half)), sin(static_cast<size_t>(rope_half));
    rope_compress_.cos_sin(st.n_entries * rate, cos.data(), sin.data());
    cpu::rope_interleaved(entry.data() + dim - 2 * rope_half, rope_half, cos.data(), sin.data(), false);
    st.append_entry(entry.data());
    st.n_pending = 0;
  }
}

// Lightning Indexer (paper §2.3.1 eqs. 13–17): score(t, s) = Σ_h w_{t,h} · ReLU(q_{t,h} · K_s), then keep the
// top-k entries among those whose window has closed by the query's position.
std::vector<std::vector<int32_t>> Model::indexer_topk(const IndexerWeights& w, const Mat& x, const Mat& q_residual,
                                                      const Rows& rows, std::vector<SequenceChunk>& chunks,
                                                      int64_t layer) const {
  const Mat kv = linear(x, w.compressor.wkv), gate = linear(x, w.compressor.wgate);
  for (size_t c = 0; c < chunks.size(); ++c)
    compress(w.compressor, kv, gate, rows.first[c], static_cast<int64_t>(chunks[c].tokens.size()),
             chunks[c].state->layers[layer].indexer);
  const int64_t n_heads = cfg_.index_n_heads, hd = cfg_.index_head_dim;
  const int64_t rope_half = rope_compress_.half();
  Mat q = linear(q_residual, w.wq_b);
  const Mat head_w = linear(x, w.weights_proj);
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float weights_scale = 1.0f / std::sqrt(static_cast<float>(n_heads));
  std::vector<std::vector<int32_t>> picks(static_cast<size_t>(x.rows));
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t s = 0; s < x.rows; ++s) {
    const int64_t pos = rows.position[s];
    const CompressorState& st = chunks[rows.sequence[s]].state->layers[layer].indexer;
    std::vector<float> cos(static_cast<size_t>(rope_half)), sin(static_cast<size_t>(rope_half));
    rope_compress_.cos_sin(pos, cos.data(), sin.data());
    for (int64_t h = 0; h < n_heads; ++h)
      cpu::rope_interleaved(q.row(s) + h * hd + hd - 2 * rope_half, rope_half, cos.data(), sin.data(), false);
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
    const int64_t k = std::min<int64_t>(cfg_.index_topk, visible);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return score[a] > score[b] || (score[a] == score[b] && a < b);
    });
    idx.resize(static_cast<size_t>(k));
    picks[s] = std::move(idx);
  }
  return picks;
}

// Shared-KV MQA with sinks over the sliding window plus compressed entries (paper §2.3).
Mat Model::attention(int64_t layer, const Mat& x, const Rows& rows, std::vector<SequenceChunk>& chunks) const {
  const AttentionWeights& w = w_.layers[layer].attn;
  const int64_t n = x.rows, heads = cfg_.num_attention_heads, hd = cfg_.head_dim, window = cfg_.sliding_window;
  const RopeTable& rope = cfg_.layer_types[layer] == AttentionType::Sliding ? rope_main_ : rope_compress_;
  const int64_t half = rope.half(), nope = hd - 2 * half;
  std::vector<float> cos(static_cast<size_t>(n * half)), sin(static_cast<size_t>(n * half));
  for (int64_t s = 0; s < n; ++s) rope.cos_sin(rows.position[s], cos.data() + s * half, sin.data() + s * half);
  auto state_of = [&](int64_t row) -> LayerState& { return chunks[rows.sequence[row]].state->layers[layer]; };

  Mat q_residual = linear(x, w.wq_a);
  rms_norm_rows(q_residual, w.q_norm.data(), cfg_.rms_norm_eps);
  Mat q = linear(q_residual, w.wq_b);
  Mat kv = linear(x, w.wkv);
  rms_norm_rows(kv, w.kv_norm.data(), cfg_.rms_norm_eps);
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      float* qh = q.row(s) + h * hd;
      rms_norm(qh, hd, nullptr, cfg_.rms_norm_eps);
      cpu::rope_interleaved(qh + nope, half, cos.data() + s * half, sin.data() + s * half, false);
    }
    cpu::rope_interleaved(kv.row(s) + nope, half, cos.data() + s * half, sin.data() + s * half, false);
  }

  std::vector<std::vector<int32_t>> picks;
  if (w.compressor) {
    const Mat ckv = linear(x, w.compressor->wkv), cgate = linear(x, w.compressor->wgate);
    for (size_t c = 0; c < chunks.size(); ++c)
      compress(*w.compressor, ckv, cgate, rows.first[c], static_cast<int64_t>(chunks[c].tokens.size()),
               chunks[c].state->layers[layer].compressor);
  }
  if (w.indexer) picks = indexer_topk(*w.indexer, x, q_residual, rows, chunks, layer);

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Mat out(n, heads * hd);
#pragma omp parallel for collapse(2) schedule(dynamic, 4)
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t pos = rows.position[s], pos0 = rows.pos0[rows.sequence[s]], first = rows.first[rows.sequence[s]];
      const LayerState& st = state_of(s);
      std::vector<const float*> keys;
      for (int64_t j = std::max<int64_t>(0, pos - window + 1); j <= pos; ++j)
        keys.push_back(j >= pos0 ? kv.row(first + j - pos0) : st.swa.data() + (j % window) * hd);
      if (w.indexer) {
        for (int32_t e : picks[s]) keys.push_back(st.compressor.entry(e));
      } else if (w.compressor) {
        const int64_t visible = std::min((pos + 1) / st.compressor.rate, st.compressor.n_entries);
        for (int64_t e = 0; e < visible; ++e) keys.push_back(st.compressor.entry(e));
      }
      const float* qh = q.row(s) + h * hd;
      std::vector<float> logits(keys.size() + 1);
      for (size_t j = 0; j < keys.size(); ++j) logits[j] = dot(qh, keys[j], hd) * scale;
      logits[keys.size()] = w.attn_sink[h];  // the sink takes probability mass but contributes no value
      cpu::softmax(logits.data(), static_cast<int64_t>(logits.size()));
      float* o = out.row(s) + h * hd;
      for (size_t j = 0; j < keys.size(); ++j)
        for (int64_t c = 0; c < hd; ++c) o[c] += logits[j] * keys[j][c];
      // K = V carries RoPE, so rotate the output back by its own position (relative positions only).
      cpu::rope_interleaved(o + nope, half, cos.data() + s * half, sin.data() + s * half, true);
    }
  }
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t first = rows.first[c], count = static_cast<int64_t>(chunks[c].tokens.size());
    std::vector<float>& swa = chunks[c].state->layers[layer].swa;
    for (int64_t s = std::max<int64_t>(0, count - window); s < count; ++s)
      std::copy(kv.row(first + s), kv.row(first + s) + hd, swa.begin() + ((rows.pos0[c] + s) % window) * hd);
  }

  // Grouped output projection: each group of heads → o_lora_rank, then one mix to hidden.
  const int64_t groups = cfg_.o_groups, group_in = heads * hd / groups, rank = cfg_.o_lora_rank;
  Mat grouped(n, groups * rank);
  for (int64_t g = 0; g < groups; ++g) {
    Mat xg(n, group_in);
    for (int64_t s = 0; s < n; ++s) std::copy(out.row(s) + g * group_in, out.row(s) + (g + 1) * group_in, xg.row(s));
    const Mat yg = linear(xg, w.wo_a.row_slice(g * rank, rank));
    for (int64_t s = 0; s < n; ++s) std::copy(yg.row(s), yg.row(s) + rank, grouped.row(s) + g * rank);
  }
  return linear(grouped, w.wo_b);
}

// SwiGLU expert with V4's clamp: silu(min(gate, L)) · clamp(up, −L, L).
Mat Model::expert(const ExpertWeights& w, const Mat& x) const {
  Mat g = linear(x, w.w1);
  const Mat u = linear(x, w.w3);
  const float limit = static_cast<float>(cfg_.swiglu_limit);
  for (size_t i = 0; i < g.v.size(); ++i)
    g.v[i] = cpu::silu(std::min(g.v[i], limit)) * std::clamp(u.v[i], -limit, limit);
  return linear(g, w.w2);
}

// MoE (paper §2.1): hash layers take experts from tid2eid[token]; others take the top-k of score + bias. Either
// way the weights are the selected scores, normalised, times the routed scaling factor; a shared expert adds.
Mat Model::moe(const MoeWeights& w, const Mat& x, const std::vector<int32_t>& tokens) const {
  const int64_t n = x.rows, n_experts = cfg_.n_routed_experts, k = cfg_.num_experts_per_tok, d = cfg_.hidden_size;
  Mat scores = linear(x, w.gate);
  for (int64_t s = 0; s < n; ++s) {
    float* r = scores.row(s);
    switch (cfg_.scoring_func) {
      case ScoringFunc::SqrtSoftplus:
        for (int64_t e = 0; e < n_experts; ++e) r[e] = std::sqrt(cpu::softplus(r[e]));
        break;
      case ScoringFunc::Sigmoid:
        for (int64_t e = 0; e < n_experts; ++e) r[e] = cpu::sigmoid(r[e]);
        break;
      case ScoringFunc::Softmax:
        cpu::softmax(r, n_experts);
        break;
    }
  }
  std::vector<std::vector<std::pair<int64_t, float>>> routed_to(static_cast<size_t>(n_experts));
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
      routed_to[e].emplace_back(s, r[e] / (sum + 1e-20f) * static_cast<float>(cfg_.routed_scaling_factor));
  }
  Mat out = w.shared ? expert(*w.shared, x) : Mat(n, d);
  Mat routed(n, d);
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto& rows = routed_to[e];
    if (rows.empty()) continue;
    Mat xe(static_cast<int64_t>(rows.size()), d);
    for (size_t i = 0; i < rows.size(); ++i) std::copy(x.row(rows[i].first), x.row(rows[i].first) + d, xe.row(i));
    const Mat ye = expert(w.experts[e], xe);
    for (size_t i = 0; i < rows.size(); ++i) {
      float* dst = routed.row(rows[i].first);
      for (int64_t c = 0; c < d; ++c) dst[c] += ye.at(i, c) * rows[i].second;
    }
  }
  for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = routed.v[i] + out.v[i];
  return out;
}

Mat Model::forward(const std::vector<int32_t>& tokens, SequenceState& state, bool all_logits,
                   const std::function<void(int64_t, const Mat&)>& observe) const {
  std::vector<SequenceChunk> chunks = {{tokens, &state, all_logits}};
  return std::move(forward_batch(chunks, observe)[0]);
}

std::vector<Mat> Model::forward_batch(std::vector<SequenceChunk>& chunks,
                                      const std::function<void(int64_t, const Mat&)>& observe) const {
  const int64_t d = cfg_.hidden_size, hc = cfg_.hc_mult;
  Rows rows;
  std::vector<int32_t> tokens;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const SequenceChunk& ch = chunks[c];
    if (ch.tokens.empty()) fail("forward: sequence ", c, " of the batch has no tokens");
    if (!ch.state || ch.state->layers.size() != static_cast<size_t>(cfg_.num_hidden_layers))
      fail("forward: sequence ", c, " of the batch has no state for this model");
    for (size_t other = 0; other < c; ++other)
      if (chunks[other].state == ch.state) fail("forward: sequence state ", c, " appears twice in one batch");
    for (int32_t t : ch.tokens)
      if (t < 0 || t >= cfg_.vocab_size) fail("forward: token id ", t, " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
    rows.first.push_back(static_cast<int64_t>(tokens.size()));
    rows.pos0.push_back(ch.state->num_tokens);
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      rows.position.push_back(ch.state->num_tokens + static_cast<int64_t>(i));
      rows.sequence.push_back(static_cast<int64_t>(c));
    }
    tokens.insert(tokens.end(), ch.tokens.begin(), ch.tokens.end());
  }
  const int64_t n = static_cast<int64_t>(tokens.size());

  // Every residual stream starts as the token embedding.
  Mat streams(n, hc * d);
  for (int64_t s = 0; s < n; ++s) {
    w_.embed.row_f32(tokens[s], streams.row(s));
    for (int64_t h = 1; h < hc; ++h) std::copy(streams.row(s), streams.row(s) + d, streams.row(s) + h * d);
  }
  Mat collapsed;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerWeights& lw = w_.layers[l];
    HcMix mix = hc_pre(lw.hc_attn, streams, collapsed);
    rms_norm_rows(collapsed, lw.attn_norm.data(), cfg_.rms_norm_eps);
    hc_post(mix, attention(l, collapsed, rows, chunks), streams);
    mix = hc_pre(lw.hc_ffn, streams, collapsed);
    rms_norm_rows(collapsed, lw.ffn_norm.data(), cfg_.rms_norm_eps);
    hc_post(mix, moe(lw.ffn, collapsed, tokens), streams);
    if (observe) observe(l, streams);
  }
  for (SequenceChunk& ch : chunks) ch.state->num_tokens += static_cast<int64_t>(ch.tokens.size());

  // HyperHead: a last learned collapse of the streams, then the final norm and the vocabulary head — only for the
  // rows whose logits were asked for.
  std::vector<int64_t> wanted;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t count = static_cast<int64_t>(chunks[c].tokens.size());
    for (int64_t i = chunks[c].all_logits ? 0 : count - 1; i < count; ++i) wanted.push_back(rows.first[c] + i);
  }
  Mat y(static_cast<int64_t>(wanted.size()), d);
  for (size_t r = 0; r < wanted.size(); ++r) {
    const int64_t s = wanted[r];
    std::vector<float> flat(streams.row(s), streams.row(s) + hc * d);
    rms_norm(flat.data(), hc * d, nullptr, cfg_.rms_norm_eps);
    float* out = y.row(static_cast<int64_t>(r));
    for (int64_t h = 0; h < hc; ++h) {
      const float mixv = dot(w_.hc_head_fn.data() + h * hc * d, flat.data(), hc * d);
      const float pre = cpu::sigmoid(mixv * w_.hc_head_scale[0] + w_.hc_head_base[h]) + static_cast<float>(cfg_.hc_eps);
      for (int64_t c = 0; c < d; ++c) out[c] += pre * streams.at(s, h * d + c);
    }
  }
  rms_norm_rows(y, w_.norm.data(), cfg_.rms_norm_eps);
  const Mat logits = linear(y, w_.head);
  std::vector<Mat> out;
  int64_t at = 0;
  for (const SequenceChunk& ch : chunks) {
    const int64_t count = ch.all_logits ? static_cast<int64_t>(ch.tokens.size()) : 1;
    Mat m(count, cfg_.vocab_size);
    std::copy(logits.row(at), logits.row(at) + count * cfg_.vocab_size, m.v.begin());
    at += count;
    out.push_back(std::move(m));
  }
  return out;
}

Model load_model(const std::string& dir) {
  ModelConfig cfg = load_config(dir);
  auto store = std::make_shared<TensorStore>(TensorStore::open(dir));
  ModelWeights weights = load_weights(cfg, store);
  return Model(std::move(cfg), std::move(weights));
}

}  // namespace strata::model::v4
