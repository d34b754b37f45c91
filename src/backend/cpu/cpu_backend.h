#pragma once
// The CPU backend of the V4 forward (model/deepseek_v4/forward.h): the readable fp32 reference every faster
// backend is tested against. State lives in the host structures of model/sequence_state.h.
#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "backend/cpu/sampling.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace strata::cpu {

// Reference: every activation in fp32 (the backend's own readable numbers). Official: DeepSeek's numerics
// (official_numerics.h): bf16 activations between ops and its quantization steps, emulated exactly.
enum class Numerics { Reference, Official };

class CpuBackend {
 public:
  // `kv_fp8_rounds` (Official only): whether a KV entry's non-RoPE dims really round through FP8 (DeepSeek's
  // TileLang kernel) or only through bf16 (its other kernel version, where the step is a no-op).
  explicit CpuBackend(Numerics numerics = Numerics::Reference, bool kv_fp8_rounds = true)
      : official_(numerics == Numerics::Official), kv_fp8_rounds_(kv_fp8_rounds) {}
  bool official() const { return official_; }

  using Tensor = Mat;
  struct Mix {
    int64_t hc = 0;
    std::vector<float> post;  // [rows, hc]      where each stream receives the block output (range [0, 2])
    std::vector<float> comb;  // [rows, hc, hc]  doubly-stochastic stream mixer, comb[j][k]: stream j → k
  };
  using Picks = std::vector<std::vector<int32_t>>;                        // per row: entry indices
  using Routing = std::vector<std::vector<std::pair<int64_t, float>>>;  // per expert: (row, weight)

  // The step: cpu_backend.cpp.
  void begin_step(const model::v4::Step& step);
  void end_step(const model::v4::Step&) {}
  // Recordings of steps (CUDA graphs) are a GPU matter: the CPU runs every step's body.
  bool replay_step(Mat&, Mat&) { return false; }
  void begin_recording(bool) {}
  void end_recording(const Mat&, const Mat&) {}
  void begin_layer() {}
  void end_layer() {}
  Mat to_host(const Mat& x) const { return x; }
  // Whether the device is still computing what the step queued: never here, every op runs on the calling thread (so
  // work done before the sampling stage, a step's late masks, is never hidden behind the forward).
  bool computing() const { return false; }
  // The listed rows of x, in order (the logits that go home whole).
  Mat rows_to_host(const Mat& x, const std::vector<int64_t>& rows) const {
    Mat m(static_cast<int64_t>(rows.size()), x.cols);
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy(x.row(rows[i]), x.row(rows[i]) + x.cols, m.row(static_cast<int64_t>(i)));
    return m;
  }
  // The listed rows of x kept past the layers (the streams the MTP layer drafts from); they come home later.
  Mat keep_rows(const Mat& x, const std::vector<int64_t>& rows) const { return rows_to_host(x, rows); }
  // The sampling stage's processors, masks and picks on the listed rows (backend/cpu/sampling.h has their meaning).
  void apply_penalties(Mat& x, const std::vector<int64_t>& rows,
                       const std::vector<const model::RowPenalties*>& penalties) const {
    for (size_t i = 0; i < rows.size(); ++i)
      cpu::apply_penalties({x.row(rows[i]), static_cast<size_t>(x.cols)}, *penalties[i]);
  }
  void mask_rows(Mat& x, const std::vector<int64_t>& rows, const std::vector<const model::TokenMask*>& masks) const {
    for (size_t i = 0; i < rows.size(); ++i) cpu::apply_mask({x.row(rows[i]), static_cast<size_t>(x.cols)}, *masks[i]);
  }
  std::vector<float> top_probabilities(const Mat& x, const std::vector<int64_t>& rows) const {
    std::vector<float> out;
    for (int64_t r : rows) out.push_back(cpu::top_probability({x.row(r), static_cast<size_t>(x.cols)}));
    return out;
  }
  std::vector<int32_t> pick_rows(const Mat& x, const std::vector<int64_t>& rows,
                                 const std::vector<model::TokenPick>& picks) const {
    std::vector<int32_t> out;
    for (size_t i = 0; i < rows.size(); ++i)
      out.push_back(cpu::pick_token({x.row(rows[i]), static_cast<size_t>(x.cols)}, picks[i]));
    return out;
  }

  // Row r of the result holds `copies` copies of token r's embedding row.
  // Products (and embed): linear.cpp (the dot products: ops.cpp).
  Mat embed(const WeightRef& table, const std::vector<int32_t>& tokens, int64_t copies) const;
  Mat linear(const Mat& x, const WeightRef& w) const;
  // linear for each of several weights on the same input (one product after another).
  std::vector<Mat> linear_many(const Mat& x, const std::vector<const WeightRef*>& ws) const {
    std::vector<Mat> out;
    for (const WeightRef* w : ws) out.push_back(linear(x, *w));
    return out;
  }
  // y[:, g·rank + o] = x[:, g·in + …] · w[g·rank + o, :]ᵀ for each of `groups` column groups of x (in = cols/groups).
  Mat grouped_linear(const Mat& x, const WeightRef& w, int64_t groups) const;
  // The form a KV row is kept in, before attention reads it (the sliding window's rows; the compressors do theirs):
  // Official numerics pass its non-RoPE dims through FP8 in 1×64 blocks; the reference keeps fp32.
  void quantize_kv_rows(Mat& kv, int64_t rope_dims) const;
  // Norms and RoPE: norm_rope.cpp.
  void rms_norm_rows(Mat& x, const std::vector<float>* weight, double eps) const;
  // Unweighted RMSNorm of every head_dim-wide slice of every row.
  void head_rms_norm(Mat& x, int64_t head_dim, double eps) const;
  // Interleaved RoPE on the trailing 2·half channels of every head_dim-wide slice, at each row's position.
  void rope(Mat& x, int64_t head_dim, const model::v4::RopeTable& table, const model::v4::Step& step, bool inverse);

  // mHC: mhc.cpp.
  // mHC (paper §2.2, eq. 8): pre/post/comb from the streams; `collapsed` ← Σ_h pre[h] · stream h.
  Mix hc_pre(const model::v4::HyperConnectionWeights& w, const Mat& streams, Mat& collapsed,
             const model::ModelConfig& cfg) const;
  // streams[k] ← post[k] · block_out + Σ_j comb[j][k] · streams[j]
  void hc_post(const Mix& mix, const Mat& block_out, Mat& streams) const;
  // The HyperHead's collapse of the streams of the `rows` asked for.
  Mat hyper_head(const model::v4::ModelWeights& w, const Mat& streams, const std::vector<int64_t>& rows,
                 const model::ModelConfig& cfg) const;
  // The same with a given head's weights (fn [hc, hc·hidden], base [hc], scale [1]): an MTP layer's own.
  Mat hyper_head(const std::vector<float>& fn, const std::vector<float>& base, const std::vector<float>& scale,
                 const Mat& streams, const std::vector<int64_t>& rows, const model::ModelConfig& cfg) const;
  // MTP input (docs/mtp.md): host rows onto the device, and the join of the projected hidden streams with the
  // projected embedding, streams[r, k·d + j] = per_stream[r·hc + k, j] + shared[r, j] ([rows·hc, d] + [rows, d] →
  // [rows, hc·d]).
  Mat from_host(const Mat& host) const { return host; }
  Mat join_streams(const Mat& per_stream, const Mat& shared, int64_t hc) const;

  // The compressor, the Lightning Indexer, attention: compressor.cpp, indexer.cpp, attention.cpp.
  // Gated pooling of every `rate` tokens into one entry of the chunk's compressor (paper §2.3.1 eqs. 9–12 with
  // overlap, §2.3.2 eqs. 20–23), then RMSNorm and RoPE at the window's first position.
  void compress(const model::v4::CompressorWeights& w, const Mat& kv, const Mat& gate, const model::v4::Step& step,
                int64_t layer, model::v4::CompressorSlot slot, const model::v4::RopeTable& rope, double eps) const;
  // score(t, s) = Σ_h w_{t,h} · ReLU(q_{t,h} · K_s); the top-k of the entries closed by each query's position.
  Picks indexer_topk(const Mat& q, const Mat& head_weights, const model::v4::Step& step, int64_t layer,
                     const model::ModelConfig& cfg) const;
  // Shared-KV MQA with sinks: each query over its keys (window from the state and this step's kv rows, plus
  // entries); returns [rows, heads·head_dim].
  Mat sparse_attention(const Mat& q, const Mat& kv, const std::vector<float>& sinks, model::v4::AttentionKeys keys,
                       const Picks& picks, const model::v4::Step& step, int64_t layer,
                       const model::ModelConfig& cfg) const;
  // The last `window` kv rows of each chunk into its sliding-window ring.
  void update_window(const Mat& kv, const model::v4::Step& step, int64_t layer, int64_t window) const;

  // Router and experts: moe.cpp.
  Routing route(Mat scores, const model::v4::MoeWeights& w, const std::vector<int32_t>& tokens,
                const model::ModelConfig& cfg) const;
  // Σ over routed experts of weight · expert(x), plus the shared expert.
  Mat experts(const Mat& x, const Routing& routing, const model::v4::MoeWeights& w, const model::ModelConfig& cfg) const;
  // Per layer so far this step: the distinct routed experts experts() ran.
  const std::vector<int64_t>& routed_experts() const { return routed_experts_; }

 private:
  // expert: moe.cpp; cos_sin: norm_rope.cpp.
  // SwiGLU expert with V4's clamp: silu(min(gate, L)) · clamp(up, −L, L).
  // Official numerics apply each row's route weight (`row_weights`, or none) before w2, as DeepSeek's code does.
  Mat expert(const model::v4::ExpertWeights& w, const Mat& x, double limit,
             const std::vector<float>* row_weights = nullptr) const;
  const std::vector<float>& cos_sin(const model::v4::RopeTable& table, const model::v4::Step& step, bool sin);

  // Official attention and indexer (official_attention.cpp): DeepSeek's sparse_attn and index scores.
  Mat official_attention(const Mat& q, const Mat& kv, const std::vector<float>& sinks, model::v4::AttentionKeys keys,
                         const Picks& picks, const model::v4::Step& step, int64_t layer,
                         const model::ModelConfig& cfg) const;
  Picks official_indexer_topk(const Mat& q, const Mat& head_weights, const model::v4::Step& step, int64_t layer,
                              const model::ModelConfig& cfg) const;
  Mat product(const Mat& x, const WeightRef& w) const;  // linear() in the backend's numerics
  Mat official_experts(const Mat& x, const Routing& routing, const model::v4::MoeWeights& w,
                       const model::ModelConfig& cfg) const;  // moe.cpp

  bool official_ = false, kv_fp8_rounds_ = true;
  std::map<const model::v4::RopeTable*, std::pair<std::vector<float>, std::vector<float>>> rope_rows_;
  mutable std::vector<int64_t> routed_experts_;
};

}  // namespace strata::cpu
