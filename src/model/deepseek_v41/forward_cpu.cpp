// DeepSeek-V4.1's fp32 CPU forward (see forward_cpu.h). Written from docs/deepseek_v4_1_reference.md and
// tests/gpu/v41_reference.py; each step of the sheet is its own function, named after it. Dot products accumulate
// in double so that this reference sits closer to exact math than either fp32 implementation it is compared with.
#include "model/deepseek_v41/forward_cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

#include "core/error.h"

namespace strata::model::v41 {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// x @ wᵀ: x [S, in], w [out, in] (the checkpoint's Linear layout, no bias) -> [S, out].
Mat linear(const Mat& x, const Mat& w) {
  if (x.cols != w.cols) fail("v41 forward: linear input width ", x.cols, " != weight in-features ", w.cols);
  Mat y(x.rows, w.rows);
  for (int64_t s = 0; s < x.rows; ++s)
    for (int64_t o = 0; o < w.rows; ++o) y.at(s, o) = static_cast<float>(dot(x.row(s), w.row(o), x.cols));
  return y;
}

// In place over `n` values: v · rsqrt(mean v² + eps), times `weight` when given (RMSNorm, §7).
void rms_norm_inplace(float* v, int64_t n, const float* weight, double eps) {
  const float r = static_cast<float>(1.0 / std::sqrt(dot(v, v, n) / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) v[i] = weight ? v[i] * r * weight[i] : v[i] * r;
}

Mat rms_norm_rows(Mat x, const Mat& weight, double eps) {
  for (int64_t s = 0; s < x.rows; ++s) rms_norm_inplace(x.row(s), x.cols, weight.v.data(), eps);
  return x;
}

// ------------------------------------------------------------------------------------------------ rope (§1.3-1.4)

// cos/sin of one rope at a list of absolute positions: [positions, rotary_dim / 2] each, freqs = inv · float(pos)
// in fp32 (attention_factor 1: no scaling).
struct RopeTable {
  Mat cos, sin;
};

RopeTable rope_table(const std::vector<float>& inv_freq, const std::vector<int64_t>& positions) {
  const auto half = static_cast<int64_t>(inv_freq.size());
  RopeTable t{Mat(static_cast<int64_t>(positions.size()), half), Mat(static_cast<int64_t>(positions.size()), half)};
  for (size_t p = 0; p < positions.size(); ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float f = inv_freq[static_cast<size_t>(i)] * static_cast<float>(positions[p]);
      t.cos.at(static_cast<int64_t>(p), i) = std::cos(f);
      t.sin.at(static_cast<int64_t>(p), i) = std::sin(f);
    }
  return t;
}

// Rotates the LAST 2·half channels of each `width`-channel head of row r of x in interleaved (even, odd) pairs by
// the angle of table row `r`; the leading "nope" channels pass through. inverse: by −θ (the output's de-rotation).
void apply_rope(Mat& x, int64_t width, const RopeTable& t, bool inverse = false) {
  const int64_t half = t.cos.cols, heads = x.cols / width;
  for (int64_t r = 0; r < x.rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x.row(r) + h * width + (width - 2 * half);
      for (int64_t i = 0; i < half; ++i) {
        const float c = t.cos.at(r, i), s = inverse ? -t.sin.at(r, i) : t.sin.at(r, i);
        const float even = v[2 * i], odd = v[2 * i + 1];
        v[2 * i] = even * c - odd * s;
        v[2 * i + 1] = even * s + odd * c;
      }
    }
}

// ------------------------------------------------------------------------------------------------ selection

// The k best indices of `scores` ordered by (−score, index): at exact ties the lowest index wins (the reference's
// assumption A1), −inf entries last in index order.
std::vector<int64_t> ordered_topk(const float* scores, int64_t n, int64_t k) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  order.resize(static_cast<size_t>(std::min(k, n)));
  return order;
}

// ------------------------------------------------------------------------------------------------ mHC (§6)

// A site's hyper-connection mixes of one token: pre (collapse weights), post (expand weights), comb [j][k]
// (Sinkhorn-normalised stream mixing, j = source stream).
struct HcMix {
  std::vector<float> pre, post, comb;
};

// Sinkhorn of one token's [hc, hc] logits: softmax over k, +eps, normalise columns, then (iters − 1) × (rows,
// columns), each with +eps in the denominator.
void sinkhorn_inplace(std::vector<float>& c, int64_t hc, int64_t iters, float eps) {
  auto normalise_columns = [&] {
    for (int64_t k = 0; k < hc; ++k) {
      float s = 0.0f;
      for (int64_t j = 0; j < hc; ++j) s += c[static_cast<size_t>(j * hc + k)];
      for (int64_t j = 0; j < hc; ++j) c[static_cast<size_t>(j * hc + k)] /= s + eps;
    }
  };
  auto normalise_rows = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < hc; ++k) s += c[static_cast<size_t>(j * hc + k)];
      for (int64_t k = 0; k < hc; ++k) c[static_cast<size_t>(j * hc + k)] /= s + eps;
    }
  };
  for (int64_t j = 0; j < hc; ++j) {
    float* row = c.data() + j * hc;
    const float m = *std::max_element(row, row + hc);
    float s = 0.0f;
    for (int64_t k = 0; k < hc; ++k) s += (row[k] = std::exp(row[k] - m));
    for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / s + eps;
  }
  normalise_columns();
  for (int64_t it = 0; it + 1 < iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// hc_mixes: the unweighted RMS of all hc·D stream values (eps = rms_norm_eps), a [(2 + hc)·hc, hc·D] projection,
// then pre = sigmoid(·scale0 + base) + hc_eps, post = 2·sigmoid(·scale1 + base), comb = Sinkhorn(·scale2 + base).
std::vector<HcMix> hc_mixes(const V41Config& c, const Mat& h, const Mat& fn, const Mat& scale, const Mat& base) {
  const int64_t hc = c.hc_mult;
  const auto eps = static_cast<float>(c.hc_eps);
  std::vector<HcMix> out(static_cast<size_t>(h.rows));
  std::vector<float> f(static_cast<size_t>(h.cols));
  for (int64_t s = 0; s < h.rows; ++s) {
    std::copy(h.row(s), h.row(s) + h.cols, f.begin());
    rms_norm_inplace(f.data(), h.cols, nullptr, c.rms_norm_eps);
    std::vector<float> mix(static_cast<size_t>(fn.rows));
    for (int64_t m = 0; m < fn.rows; ++m) mix[static_cast<size_t>(m)] = static_cast<float>(dot(f.data(), fn.row(m), h.cols));
    HcMix& x = out[static_cast<size_t>(s)];
    for (int64_t k = 0; k < hc; ++k) {
      x.pre.push_back(sigmoid(mix[static_cast<size_t>(k)] * scale.v[0] + base.v[static_cast<size_t>(k)]) + eps);
      x.post.push_back(2.0f * sigmoid(mix[static_cast<size_t>(hc + k)] * scale.v[1] + base.v[static_cast<size_t>(hc + k)]));
    }
    for (int64_t i = 0; i < hc * hc; ++i)
      x.comb.push_back(mix[static_cast<size_t>(2 * hc + i)] * scale.v[2] + base.v[static_cast<size_t>(2 * hc + i)]);
    sinkhorn_inplace(x.comb, hc, c.hc_sinkhorn_iters, eps);
  }
  return out;
}

// hc_collapse: Σ_k pre_k · stream_k per token (pre is not normalised). h [S, hc·D] -> [S, D].
Mat hc_collapse(const Mat& h, const std::vector<std::vector<float>>& pre, int64_t hc) {
  const int64_t d = h.cols / hc;
  Mat out(h.rows, d);
  for (int64_t s = 0; s < h.rows; ++s)
    for (int64_t k = 0; k < hc; ++k) {
      const float p = pre[static_cast<size_t>(s)][static_cast<size_t>(k)];
      const float* src = h.row(s) + k * d;
      for (int64_t i = 0; i < d; ++i) out.at(s, i) += p * src[i];
    }
  return out;
}

// hc_expand: stream_k = post_k · x + Σ_j comb[j][k] · res_j (comb applied transposed).
Mat hc_expand(const Mat& x, const Mat& res, const std::vector<HcMix>& mix, int64_t hc) {
  const int64_t d = x.cols;
  Mat out(res.rows, res.cols);
  for (int64_t s = 0; s < res.rows; ++s) {
    const HcMix& m = mix[static_cast<size_t>(s)];
    for (int64_t k = 0; k < hc; ++k) {
      float* o = out.row(s) + k * d;
      for (int64_t i = 0; i < d; ++i) {
        float acc = m.post[static_cast<size_t>(k)] * x.at(s, i);
        for (int64_t j = 0; j < hc; ++j) acc += m.comb[static_cast<size_t>(j * hc + k)] * res.at(s, j * d + i);
        o[i] = acc;
      }
    }
  }
  return out;
}

std::vector<std::vector<float>> pre_of(const std::vector<HcMix>& mix) {
  std::vector<std::vector<float>> p;
  for (const HcMix& m : mix) p.push_back(m.pre);
  return p;
}

// ------------------------------------------------------------------------------------------------ forward context

// What one forward shares across layers: positions, the cos/sin of both ropes at the query positions, and the
// per-forward "shared" values a kv/index source publishes for the layers after it (§3.8, cache path: a source
// replaces its predecessor's).
struct ForwardCtx {
  const V41Config& c;
  const V41Weights& w;
  std::vector<int64_t> positions;
  RopeTable main_rope, compress_rope;
  std::optional<Mat> compressed_kv;  // [T, hd] post-rope latents of the latest kv source
  std::optional<Mat> index_keys;     // [T, index_head_dim] post-rope indexer keys of the latest kv source
  std::optional<Mat> topk_bias;      // [S, T] 0 / −inf of the latest index source
  std::optional<std::vector<std::vector<char>>> candidates;  // [S][T] of the candidate source

  const Mat& W(const std::string& name) const { return w.at(name); }
  RopeTable compress_at(const std::vector<int64_t>& pos) const {
    return rope_table(rope_inv_freq(c.compress_rope, c.qk_rope_head_dim, c.max_position_embeddings), pos);
  }
};

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// ------------------------------------------------------------------------------------------------ attention (§3)

// SWA keys = values of a fresh cache: every token's post-rope latent; query p sees j iff p − window < j ≤ p.
Mat swa_mask(const std::vector<int64_t>& pos, int64_t window) {
  const auto n = static_cast<int64_t>(pos.size());
  Mat mask(n, n, kNegInf);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t j = 0; j < n; ++j)
      if (pos[static_cast<size_t>(j)] <= pos[static_cast<size_t>(s)] &&
          pos[static_cast<size_t>(j)] > pos[static_cast<size_t>(s)] - window)
        mask.at(s, j) = 0.0f;
  return mask;
}

// The compressor of a kv source (§3.3): ratio 1 makes every token an entry; ratio r > 1 pools each complete group
// of r tokens with a per-channel softmax of the gate over the group. Then RMSNorm. Returns the pre-rope latents
// [G, hd] (G may be 0) and the absolute position of each entry (its group's first token).
Mat compressor_latents(const ForwardCtx& f, int64_t layer, const Mat& x, std::vector<int64_t>& entry_pos) {
  const std::string p = "layers." + std::to_string(layer) + ".attn.compressor.";
  const int64_t ratio = f.c.ratio(layer);
  Mat kv = linear(x, f.W(p + "wkv.weight"));
  Mat latent;
  if (ratio == 1) {
    latent = std::move(kv);
  } else {
    const Mat gate = linear(x, f.W(p + "wgate.weight"));
    const int64_t groups = x.rows / ratio, hd = kv.cols;
    latent = Mat(groups, hd);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t ch = 0; ch < hd; ++ch) {
        float m = kNegInf;
        for (int64_t r = 0; r < ratio; ++r) m = std::max(m, gate.at(g * ratio + r, ch));
        float den = 0.0f, num = 0.0f;
        for (int64_t r = 0; r < ratio; ++r) {
          const float e = std::exp(gate.at(g * ratio + r, ch) - m);
          den += e;
          num += e * kv.at(g * ratio + r, ch);
        }
        latent.at(g, ch) = num / den;
      }
  }
  entry_pos.clear();
  for (int64_t g = 0; g < latent.rows; ++g) entry_pos.push_back(g * ratio);
  return rms_norm_rows(std::move(latent), f.W(p + "norm.weight"), f.c.rms_norm_eps);
}

// Two-level selection (§4.3) at the candidate source: per query, blocks of `block` entries scored by their best
// index score; the newest (possibly partial) visible block is always kept; the best `topk_blocks` blocks with a
// finite score survive. Returns [S][T] membership.
std::vector<std::vector<char>> select_candidate_blocks(const Mat& scores, const std::vector<int64_t>& visible_len,
                                                       int64_t topk_blocks, int64_t block) {
  const int64_t T = scores.cols, nb = (T + block - 1) / block;
  std::vector<std::vector<char>> keep(static_cast<size_t>(scores.rows), std::vector<char>(static_cast<size_t>(T), 0));
  std::vector<float> bscore(static_cast<size_t>(nb));
  for (int64_t s = 0; s < scores.rows; ++s) {
    for (int64_t b = 0; b < nb; ++b) {
      float m = kNegInf;
      for (int64_t t = b * block; t < std::min(T, (b + 1) * block); ++t) m = std::max(m, scores.at(s, t));
      bscore[static_cast<size_t>(b)] = m;
    }
    const int64_t len = visible_len[static_cast<size_t>(s)];
    if (len > 0) bscore[static_cast<size_t>((len - 1) / block)] = std::numeric_limits<float>::infinity();
    for (int64_t b : ordered_topk(bscore.data(), nb, topk_blocks)) {
      if (!(bscore[static_cast<size_t>(b)] > kNegInf)) continue;
      for (int64_t t = b * block; t < std::min(T, (b + 1) * block); ++t) keep[static_cast<size_t>(s)][static_cast<size_t>(t)] = 1;
    }
  }
  return keep;
}

// The indexer of an index source (§4): keys from the kv source's pre-rope latents (owners only), per-query scores
// I = Σ_h relu(q_h·k)/√ihd · weight_h/√nh over the entries this layer's ratio makes visible, the candidate mask of
// the candidate source (later index sources), and the top-k as an additive bias published for the layers after it.
void indexer(ForwardCtx& f, int64_t layer, const Mat& x, const Mat& qr, const Mat* latent,
             const std::vector<int64_t>& entry_pos) {
  const std::string p = "layers." + std::to_string(layer) + ".attn.indexer.";
  const V41Config& c = f.c;
  const int64_t nh = c.index_n_heads, ihd = c.index_head_dim, ratio = c.ratio(layer), S = x.rows;
  if (contains(c.kv_source_layer_ids, layer)) {
    Mat keys(0, ihd);
    if (latent && latent->rows > 0) {
      keys = rms_norm_rows(linear(*latent, f.W(p + "wk.weight")), f.W(p + "k_norm.weight"), c.rms_norm_eps);
      apply_rope(keys, ihd, f.compress_at(entry_pos));
    }
    f.index_keys = std::move(keys);
  }
  if (!f.index_keys || f.index_keys->rows == 0) return;
  const Mat& keys = *f.index_keys;
  const int64_t T = keys.rows;
  Mat q = linear(qr, f.W(p + "wq_b.weight"));  // [S, nh·ihd]
  apply_rope(q, ihd, f.compress_rope);
  const Mat hw = linear(x, f.W(p + "weights_proj.weight"));  // [S, nh]
  Mat score(S, T, kNegInf);
  std::vector<int64_t> visible_len(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    visible_len[static_cast<size_t>(s)] = (f.positions[static_cast<size_t>(s)] + 1) / ratio;
    for (int64_t t = 0; t < std::min(T, visible_len[static_cast<size_t>(s)]); ++t) {
      float acc = 0.0f;
      for (int64_t h = 0; h < nh; ++h) {
        const float qk = std::max(0.0f, static_cast<float>(dot(q.row(s) + h * ihd, keys.row(t), ihd))) *
                         static_cast<float>(1.0 / std::sqrt(static_cast<double>(ihd)));
        acc += qk * hw.at(s, h) * static_cast<float>(1.0 / std::sqrt(static_cast<double>(nh)));
      }
      score.at(s, t) = acc;
    }
  }
  const int64_t cs = c.candidate_source_layer_id;
  if (layer == cs) {
    f.candidates = select_candidate_blocks(score, visible_len, c.candidate_topk_blocks, c.candidate_block_size);
  } else if (cs >= 0 && cs < layer && f.candidates) {
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < T; ++t)
        if (!(*f.candidates)[static_cast<size_t>(s)][static_cast<size_t>(t)]) score.at(s, t) = kNegInf;
  }
  Mat bias(S, T, kNegInf);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t : ordered_topk(score.row(s), T, c.index_topk))
      if (score.at(s, t) > kNegInf) bias.at(s, t) = 0.0f;  // a −inf pick is a dummy: it stays masked
  f.topk_bias = std::move(bias);
}

// Sink attention (§3.6): one shared K = V latent head; per head a learned sink logit joins the softmax and is
// dropped from the output. q [S, H·hd], keys [N, hd], mask [S, N] -> [S, H·hd].
Mat sink_attention(const Mat& q, const Mat& keys, const Mat& mask, const Mat& sink, int64_t heads) {
  const int64_t hd = keys.cols, N = keys.rows;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  Mat out(q.rows, q.cols);
  std::vector<float> logit(static_cast<size_t>(N));
  for (int64_t s = 0; s < q.rows; ++s)
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q.row(s) + h * hd;
      float m = sink.v[static_cast<size_t>(h)];
      for (int64_t n = 0; n < N; ++n) {
        logit[static_cast<size_t>(n)] =
            mask.at(s, n) == kNegInf ? kNegInf : static_cast<float>(dot(qh, keys.row(n), hd)) * scale + mask.at(s, n);
        m = std::max(m, logit[static_cast<size_t>(n)]);
      }
      double den = std::exp(static_cast<double>(sink.v[static_cast<size_t>(h)]) - m);
      for (int64_t n = 0; n < N; ++n) den += std::exp(static_cast<double>(logit[static_cast<size_t>(n)]) - m);
      float* o = out.row(s) + h * hd;
      for (int64_t n = 0; n < N; ++n) {
        if (logit[static_cast<size_t>(n)] == kNegInf) continue;
        const auto pr = static_cast<float>(std::exp(static_cast<double>(logit[static_cast<size_t>(n)]) - m) / den);
        const float* k = keys.row(n);
        for (int64_t i = 0; i < hd; ++i) o[i] += pr * k[i];
      }
    }
  return out;
}

// Grouped output projection (§3.7): heads split into o_groups groups, each group's concatenated heads projected by
// its own o_lora_rank rows of wo_a, then wo_b over all groups.
Mat grouped_output_projection(const ForwardCtx& f, int64_t layer, const Mat& o) {
  const std::string p = "layers." + std::to_string(layer) + ".attn.";
  const int64_t G = f.c.o_groups, r = f.c.o_lora_rank, gw = o.cols / G;
  const Mat& wa = f.W(p + "wo_a.weight");  // [G·r, gw]
  Mat y(o.rows, G * r);
  for (int64_t s = 0; s < o.rows; ++s)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t i = 0; i < r; ++i) y.at(s, g * r + i) = static_cast<float>(dot(o.row(s) + g * gw, wa.row(g * r + i), gw));
  return linear(y, f.W(p + "wo_b.weight"));
}

// One layer's attention (§3): x = attn_norm(collapse) [S, D] -> [S, D].
Mat attention(ForwardCtx& f, int64_t layer, const Mat& x) {
  const std::string p = "layers." + std::to_string(layer) + ".attn.";
  const V41Config& c = f.c;
  const int64_t ratio = c.ratio(layer), hd = c.head_dim;
  const RopeTable& rope = ratio == 0 ? f.main_rope : f.compress_rope;  // ratio > 0: the compress rope for SWA too
  const Mat qr = rms_norm_rows(linear(x, f.W(p + "wq_a.weight")), f.W(p + "q_norm.weight"), c.rms_norm_eps);
  Mat q = linear(qr, f.W(p + "wq_b.weight"));  // [S, H·hd], no per-head norm in V4.1
  apply_rope(q, hd, rope);
  Mat keys = rms_norm_rows(linear(x, f.W(p + "wkv.weight")), f.W(p + "kv_norm.weight"), c.rms_norm_eps);
  apply_rope(keys, hd, rope);
  Mat mask = swa_mask(f.positions, c.sliding_window);
  if (ratio > 0) {
    const bool kv_source = contains(c.kv_source_layer_ids, layer);
    std::optional<Mat> latent;
    std::vector<int64_t> entry_pos;
    if (kv_source) latent = compressor_latents(f, layer, x, entry_pos);
    // The indexer reads the pre-rope latents, so it runs before they are rotated and published.
    if (contains(c.index_source_layer_ids, layer)) indexer(f, layer, x, qr, latent ? &*latent : nullptr, entry_pos);
    if (kv_source) {
      if (latent->rows > 0) apply_rope(*latent, hd, f.compress_at(entry_pos));
      f.compressed_kv = std::move(*latent);
    }
    if (!f.compressed_kv) fail("v41 forward: layer ", layer, " has ratio ", ratio, " but no kv source before it");
    const Mat& comp = *f.compressed_kv;
    const int64_t T = comp.rows, N = keys.rows;
    // A bias of another width belongs to a different kv source: then no compressed entry is visible (§3.5).
    const bool bias_fits = f.topk_bias && f.topk_bias->cols == T;
    Mat all_keys(N + T, hd), all_mask(x.rows, N + T, kNegInf);
    std::copy(keys.v.begin(), keys.v.end(), all_keys.v.begin());
    std::copy(comp.v.begin(), comp.v.end(), all_keys.v.begin() + N * hd);
    for (int64_t s = 0; s < x.rows; ++s) {
      std::copy(mask.row(s), mask.row(s) + N, all_mask.row(s));
      if (bias_fits) std::copy(f.topk_bias->row(s), f.topk_bias->row(s) + T, all_mask.row(s) + N);
    }
    keys = std::move(all_keys);
    mask = std::move(all_mask);
  }
  Mat o = sink_attention(q, keys, mask, f.W(p + "attn_sink"), c.num_attention_heads);
  apply_rope(o, hd, rope, /*inverse=*/true);  // the values carried rope; undo it at the query position
  return grouped_output_projection(f, layer, o);
}

// ------------------------------------------------------------------------------------------------ MoE (§5)

float sqrt_softplus(float x) {
  const float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // torch softplus (beta 1, threshold 20)
  return std::sqrt(sp);
}

// One expert on one token: u clamped to ±limit, g to ≤ limit; y = silu(g)·u·weight (routing weight before w2).
void expert_add(const ForwardCtx& f, const std::string& prefix, const float* x, float weight, float* acc) {
  const Mat& w1 = f.W(prefix + "w1.weight");
  const Mat& w3 = f.W(prefix + "w3.weight");
  const Mat& w2 = f.W(prefix + "w2.weight");
  const auto lim = static_cast<float>(f.c.swiglu_limit);
  std::vector<float> y(static_cast<size_t>(w1.rows));
  for (int64_t i = 0; i < w1.rows; ++i) {
    auto g = static_cast<float>(dot(x, w1.row(i), w1.cols));
    auto u = static_cast<float>(dot(x, w3.row(i), w3.cols));
    if (lim > 0) {
      u = std::clamp(u, -lim, lim);
      g = std::min(g, lim);
    }
    y[static_cast<size_t>(i)] = g / (1.0f + std::exp(-g)) * u * weight;
  }
  for (int64_t o = 0; o < w2.rows; ++o) acc[o] += static_cast<float>(dot(y.data(), w2.row(o), w2.cols));
}

// The MoE block (§5): router scores sqrt(softplus(logits / temp)); selection by score + bias (the bias only
// steers), weights the unbiased scores normalised over the top-k and scaled; routed experts in ascending order,
// then the shared expert.
Mat moe(const ForwardCtx& f, int64_t layer, const Mat& x) {
  const std::string p = "layers." + std::to_string(layer) + ".ffn.";
  const V41Config& c = f.c;
  if (c.scoring_func != "sqrtsoftplus") fail("v41 forward: scoring_func '", c.scoring_func, "' is not implemented");
  const Mat logits = linear(x, f.W(p + "gate.weight"));
  const Mat& bias = f.W(p + "gate.bias");
  const int64_t E = logits.cols, k = c.num_experts_per_tok;
  Mat out(x.rows, x.cols);
  std::vector<float> score(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
  for (int64_t s = 0; s < x.rows; ++s) {
    for (int64_t e = 0; e < E; ++e) {
      score[static_cast<size_t>(e)] = sqrt_softplus(logits.at(s, e) / static_cast<float>(c.gate_temp));
      biased[static_cast<size_t>(e)] = score[static_cast<size_t>(e)] + bias.v[static_cast<size_t>(e)];
    }
    std::vector<int64_t> chosen = ordered_topk(biased.data(), E, k);
    float sum = 0.0f;
    for (int64_t e : chosen) sum += score[static_cast<size_t>(e)];
    std::sort(chosen.begin(), chosen.end());
    for (int64_t e : chosen) {
      float wgt = score[static_cast<size_t>(e)];
      if (c.norm_topk_prob && k > 1) wgt /= sum + 1e-20f;
      wgt *= static_cast<float>(c.routed_scaling_factor);
      expert_add(f, p + "experts." + std::to_string(e) + ".", x.row(s), wgt, out.row(s));
    }
    expert_add(f, p + "shared_experts.", x.row(s), 1.0f, out.row(s));
  }
  return out;
}

// ------------------------------------------------------------------------------------------------ Engram (§2)

// Adds the layer's hashed n-gram memory to all streams (engram_inject), from the table rows of each position.
void engram(const ForwardCtx& f, int64_t layer, const std::vector<int64_t>& history, Mat& h) {
  const V41Config& c = f.c;
  const auto li = static_cast<size_t>(
      std::find(c.engram.layer_ids.begin(), c.engram.layer_ids.end(), layer) - c.engram.layer_ids.begin());
  const EngramLayerLayout& layout = f.w.engram_layout.at(li);
  const std::string p = "layers." + std::to_string(layer) + ".engram.";
  const Mat& table = f.W(p + "embed.weight");
  if (f.w.has(p + "embed.scale")) fail("v41 forward: ", p, "embed.scale (quantised Engram tables) is not supported on the fp32 path");
  const int64_t ehd = table.cols;
  const int64_t pad_code = f.w.engram_token_map.at(static_cast<size_t>(c.engram_pad_id));
  Mat rows_of(h.rows, static_cast<int64_t>(layout.offsets.size()) * ehd);
  for (int64_t s = 0; s < h.rows; ++s) {
    const std::vector<int64_t> ids = engram_row_ids(layout, history, s, pad_code);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= table.rows) fail("v41 forward: Engram row ", ids[i], " outside ", p, "embed.weight");
      std::copy(table.row(ids[i]), table.row(ids[i]) + ehd, rows_of.row(s) + static_cast<int64_t>(i) * ehd);
    }
  }
  const Mat& qw = f.W(p + "q_weight");
  const Mat& kw = f.W(p + "k_weight");
  Mat qk(c.hc_mult, c.hidden_size);
  for (size_t i = 0; i < qk.v.size(); ++i) qk.v[i] = qw.v[i] * kw.v[i];
  engram_inject(h, rows_of, f.W(p + "wkv.weight"), qk, c.hc_mult, static_cast<float>(c.rms_norm_eps));
}

// ------------------------------------------------------------------------------------------------ layer (§6)

// One decoder layer, single pass: the attention site collapses with the previous site's pre, the ffn site with
// this layer's attention pre; returns the ffn pre for the next layer.
std::vector<std::vector<float>> decoder_layer(ForwardCtx& f, int64_t layer, const std::vector<int64_t>& history, Mat& h,
                                              const std::vector<std::vector<float>>& pre_mix) {
  const std::string p = "layers." + std::to_string(layer) + ".";
  const V41Config& c = f.c;
  const int64_t hc = c.hc_mult;
  if (contains(c.engram.layer_ids, layer)) engram(f, layer, history, h);
  const std::vector<HcMix> attn_mix = hc_mixes(c, h, f.W(p + "hc_attn_fn"), f.W(p + "hc_attn_scale"), f.W(p + "hc_attn_base"));
  const Mat a_in = rms_norm_rows(hc_collapse(h, pre_mix, hc), f.W(p + "attn_norm.weight"), c.rms_norm_eps);
  h = hc_expand(attention(f, layer, a_in), h, attn_mix, hc);
  const std::vector<HcMix> ffn_mix = hc_mixes(c, h, f.W(p + "hc_ffn_fn"), f.W(p + "hc_ffn_scale"), f.W(p + "hc_ffn_base"));
  const Mat f_in = rms_norm_rows(hc_collapse(h, pre_of(attn_mix), hc), f.W(p + "ffn_norm.weight"), c.rms_norm_eps);
  h = hc_expand(moe(f, layer, f_in), h, ffn_mix, hc);
  return pre_of(ffn_mix);
}

}  // namespace

Mat v41_logits_cpu(const V41Config& config, const V41Weights& weights, const std::vector<int32_t>& tokens) {
  if (tokens.empty()) fail("v41 forward: empty token sequence");
  const int64_t S = static_cast<int64_t>(tokens.size()), hc = config.hc_mult, D = config.hidden_size;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= config.vocab_size)
      fail("v41 forward: token id ", tokens[i], " at position ", i, " is outside the vocabulary [0, ", config.vocab_size, ")");
  std::vector<int64_t> positions(static_cast<size_t>(S));
  std::iota(positions.begin(), positions.end(), 0);
  ForwardCtx f{config, weights, positions,
               rope_table(rope_inv_freq(config.main_rope, config.qk_rope_head_dim, config.max_position_embeddings), positions),
               rope_table(rope_inv_freq(config.compress_rope, config.qk_rope_head_dim, config.max_position_embeddings), positions),
               {}, {}, {}, {}};
  // The Engram history: each token's normalised id.
  std::vector<int64_t> history;
  if (!config.engram.layer_ids.empty())
    for (int32_t t : tokens) history.push_back(weights.engram_token_map.at(static_cast<size_t>(t)));
  // Streams start as the embedding copied hc times; the first collapse's pre is one-hot on stream 0.
  const Mat& embed = weights.at("embed.weight");
  Mat h(S, hc * D);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t k = 0; k < hc; ++k) std::copy(embed.row(tokens[static_cast<size_t>(s)]), embed.row(tokens[static_cast<size_t>(s)]) + D, h.row(s) + k * D);
  std::vector<float> one_hot(static_cast<size_t>(hc), 0.0f);
  one_hot[0] = 1.0f;
  std::vector<std::vector<float>> pre(static_cast<size_t>(S), one_hot);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) pre = decoder_layer(f, layer, history, h, pre);
  // No learned hc head in V4.1: the last ffn pre collapses the streams.
  const Mat final_h = rms_norm_rows(hc_collapse(h, pre, hc), weights.at("norm.weight"), config.rms_norm_eps);
  return linear(final_h, weights.at("head.weight"));
}

}  // namespace strata::model::v41
