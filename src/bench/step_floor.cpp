#include "bench/step_floor.h"

#include <algorithm>

#include "core/error.h"

namespace strata::bench {

namespace {

using model::AttentionType;
using model::MlpType;
using model::ModelConfig;

constexpr double kF32 = 4;  // vectors, sliding-window keys and compressed entries are fp32 on the device

// One layer's weights outside the routed experts: matrix parameters (each used once per token) and fp32 floats.
struct LayerWeights {
  double matrix_params = 0, vector_floats = 0, hc_params = 0;  // hc: the mHC mappings, a product per token
};

LayerWeights layer_weights(const ModelConfig& c, int64_t layer) {
  const double d = static_cast<double>(c.hidden_size), hd = static_cast<double>(c.head_dim),
               heads = static_cast<double>(c.num_attention_heads), q_lora = static_cast<double>(c.q_lora_rank),
               o = static_cast<double>(c.o_groups * c.o_lora_rank), hc = static_cast<double>(c.hc_mult),
               mix = (2 + hc) * hc, inter = static_cast<double>(c.moe_intermediate_size),
               experts = static_cast<double>(c.n_routed_experts);
  LayerWeights w;
  // Attention (paper §2.3): q LoRA, the shared KV projection, the grouped low-rank output.
  w.matrix_params += q_lora * d + heads * hd * q_lora + hd * d + o * (heads * hd / static_cast<double>(c.o_groups)) + d * o;
  w.vector_floats += q_lora + hd + heads;  // q_norm, kv_norm, attn_sink
  // Compressors: gated pooling with wkv and wgate of width 2·dim when the windows overlap (CSA), dim otherwise (HCA).
  auto compressor = [&](double dim, bool overlap) {
    const double width = overlap ? 2 * dim : dim;
    w.matrix_params += 2 * width * d;
    w.vector_floats += static_cast<double>(c.compress_rate(layer)) * width + dim;  // ape, norm
  };
  const AttentionType type = c.layer_types[static_cast<size_t>(layer)];
  if (type != AttentionType::Sliding) compressor(hd, type == AttentionType::CompressedSparse);
  if (type == AttentionType::CompressedSparse) {
    const double ih = static_cast<double>(c.index_n_heads), ihd = static_cast<double>(c.index_head_dim);
    w.matrix_params += ih * ihd * q_lora + ih * d;  // indexer wq_b, weights_proj
    compressor(ihd, true);
  }
  // MoE: the router and the shared experts (routed experts are counted by use).
  w.matrix_params += experts * d + static_cast<double>(c.n_shared_experts) * 3 * inter * d;
  if (c.mlp_layer_types[static_cast<size_t>(layer)] == MlpType::Moe) w.vector_floats += experts;  // correction bias
  // mHC at both sites: fn [mix, hc·hidden], base [mix], scale [3]; and the two RMSNorm weights.
  w.hc_params = 2 * mix * hc * d;
  w.vector_floats += w.hc_params + 2 * (mix + 3) + 2 * d;
  return w;
}

// Keys one query at position `pos` attends to in `layer`, and the indexer's scoring FLOPs for it.
struct QueryAttention {
  double keys = 0, indexer_flops = 0;
};

QueryAttention query_attention(const ModelConfig& c, int64_t layer, int64_t pos) {
  QueryAttention q;
  q.keys = static_cast<double>(std::min(c.sliding_window, pos + 1));
  const AttentionType type = c.layer_types[static_cast<size_t>(layer)];
  if (type == AttentionType::Sliding) return q;
  const int64_t closed = (pos + 1) / c.compress_rate(layer);  // entries whose window has ended by this query
  if (type == AttentionType::HeavilyCompressed) {
    q.keys += static_cast<double>(closed);
  } else {
    q.keys += static_cast<double>(std::min(c.index_topk, closed));
    q.indexer_flops = 2.0 * static_cast<double>(closed * c.index_n_heads * c.index_head_dim);
  }
  return q;
}

}  // namespace

WeightBytes device_weight_bytes(const std::string& precision) {
  if (precision == "bf16") return {2.0, 2.0};
  if (precision == "fp32") return {4.0, 4.0};
  if (precision == "fp8") return {1.0 + 4.0 / (128.0 * 128.0), 2.0};
  fail("step floor: unknown weight precision '", precision, "' (expected bf16, fp32 or fp8)");
}

StepWork step_floor(const ModelConfig& c, const std::vector<SequenceStep>& sequences,
                    const std::vector<int64_t>& routed_experts, const WeightBytes& bytes_per_param) {
  if (static_cast<int64_t>(routed_experts.size()) != c.num_hidden_layers)
    fail("step floor: routed experts for ", routed_experts.size(), " layers, expected ", c.num_hidden_layers);
  const double d = static_cast<double>(c.hidden_size), hd = static_cast<double>(c.head_dim),
               hc = static_cast<double>(c.hc_mult), vocab = static_cast<double>(c.vocab_size),
               expert_params = 3.0 * static_cast<double>(c.moe_intermediate_size) * d,
               topk = static_cast<double>(c.num_experts_per_tok);
  double tokens = 0;
  for (const SequenceStep& s : sequences) tokens += static_cast<double>(s.tokens);
  const double logit_rows = static_cast<double>(sequences.size());

  StepWork w;
  // The ends: embedding rows of the step's tokens (a gather), the final norm and HyperHead, the vocabulary head.
  w.weight_bytes +=
      tokens * d * bytes_per_param.ends + (d + hc * hc * d + hc + 1) * kF32 + vocab * d * bytes_per_param.ends;
  w.flops += logit_rows * 2 * (vocab * d + hc * hc * d);
  double per_token_params = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights lw = layer_weights(c, l);
    const double routed = static_cast<double>(routed_experts[static_cast<size_t>(l)]);
    w.weight_bytes += (lw.matrix_params + routed * expert_params) * bytes_per_param.matrix + lw.vector_floats * kF32;
    if (c.mlp_layer_types[static_cast<size_t>(l)] == MlpType::HashMoe) w.weight_bytes += tokens * topk * 4;  // int32
    per_token_params += lw.matrix_params + lw.hc_params + topk * expert_params;
    const AttentionType type = c.layer_types[static_cast<size_t>(l)];
    for (const SequenceStep& s : sequences) {
      // State: the window's keys from earlier steps, then the entries this step's queries read.
      w.state_bytes += static_cast<double>(std::min(c.sliding_window, s.context)) * hd * kF32;
      if (type != AttentionType::Sliding) {
        const double closed = static_cast<double>((s.context + s.tokens) / c.compress_rate(l));
        if (type == AttentionType::HeavilyCompressed)
          w.state_bytes += closed * hd * kF32;
        else
          w.state_bytes += closed * static_cast<double>(c.index_head_dim) * kF32 +
                           std::min(closed, static_cast<double>(s.tokens * c.index_topk)) * hd * kF32;
      }
      // Attention: QKᵀ and PV (2·head_dim FLOPs each per key and head), the indexer's scores.
      for (int64_t pos = s.context; pos < s.context + s.tokens; ++pos) {
        const QueryAttention q = query_attention(c, l, pos);
        w.flops += q.keys * static_cast<double>(c.num_attention_heads) * 4 * hd + q.indexer_flops;
      }
    }
  }
  w.flops += 2 * per_token_params * tokens;
  return w;
}

double floor_seconds(const StepWork& work, double bandwidth_gbs, double peak_tflops) {
  return std::max(work.bytes() / (bandwidth_gbs * 1e9), work.flops / (peak_tflops * 1e12));
}

}  // namespace strata::bench
