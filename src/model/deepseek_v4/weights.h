#pragma once
// DeepSeek-V4 parameters, one struct per module of the paper, named as in the official checkpoint.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace strata::model::v4 {

// Gated pooling of `rate` consecutive tokens into one entry (paper §2.3.1–2.3.2). `overlap` (CSA) projects to
// 2·dim: the first half of a token feeds the *next* window's entry, the second half its own window's entry.
struct CompressorWeights {
  WeightRef wkv, wgate;        // [c·dim, hidden], c = 2 with overlap
  std::vector<float> ape;      // [rate, c·dim] learned position bias added to the gate logits
  std::vector<float> norm;     // [dim]
  int64_t rate = 0, dim = 0;
  bool overlap = false;
};

// Lightning Indexer (paper §2.3.1): picks the top-k compressed entries per query.
struct IndexerWeights {
  WeightRef wq_b;              // [n_heads·head_dim, q_lora_rank]
  WeightRef weights_proj;      // [n_heads, hidden]
  CompressorWeights compressor;
};

struct AttentionWeights {
  WeightRef wq_a;              // [q_lora_rank, hidden]
  std::vector<float> q_norm;   // [q_lora_rank]
  WeightRef wq_b;              // [heads·head_dim, q_lora_rank]
  WeightRef wkv;               // [head_dim, hidden]
  std::vector<float> kv_norm;  // [head_dim]
  WeightRef wo_a;              // [o_groups·o_lora_rank, heads·head_dim / o_groups]
  WeightRef wo_b;              // [hidden, o_groups·o_lora_rank]
  std::vector<float> attn_sink;  // [heads]
  std::optional<CompressorWeights> compressor;  // CSA and HCA layers
  std::optional<IndexerWeights> indexer;        // CSA layers
};

struct ExpertWeights {
  WeightRef w1, w2, w3;  // gate [inter, hidden], down [hidden, inter], up [inter, hidden]
};

struct MoeWeights {
  WeightRef gate;                      // router [n_routed, hidden]
  std::vector<float> gate_bias;        // top-k layers: selection-only correction bias [n_routed]
  std::vector<int32_t> tid2eid;        // hash layers: [vocab, top_k] expert ids per token id
  std::vector<ExpertWeights> experts;  // n_routed
  std::optional<ExpertWeights> shared;
};

// The mHC mapping of one site (paper §2.2): fn [(2+hc)·hc, hc·hidden], base [(2+hc)·hc], scale [3].
struct HyperConnectionWeights {
  std::vector<float> fn, base, scale;
};

struct LayerWeights {
  HyperConnectionWeights hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;
  AttentionWeights attn;
  MoeWeights ffn;
};

// One MTP draft layer (DeepSeek's MTPBlock; docs/mtp.md): a layer of its own, always sliding-window attention and
// top-k MoE, fed by the main model's last-layer streams (hnorm, then h_proj on each stream) plus the next token's
// embedding (enorm, then e_proj, added to every stream); its own HyperHead and final norm, then the main model's
// vocabulary head. It shares `embed` and `head` with the main model.
struct MtpWeights {
  WeightRef e_proj, h_proj;                                    // [hidden, hidden]
  std::vector<float> enorm, hnorm, norm;                       // [hidden]
  std::vector<float> hc_head_fn, hc_head_base, hc_head_scale;  // [hc, hc·hidden], [hc], [1]
  LayerWeights block;
};

struct ModelWeights {
  WeightRef embed;  // [vocab, hidden]
  WeightRef head;   // [vocab, hidden]
  std::vector<float> norm;
  std::vector<float> hc_head_fn, hc_head_base, hc_head_scale;  // [hc, hc·hidden], [hc], [1]
  std::vector<LayerWeights> layers;
  // num_nextn_predict_layers of them when the checkpoint has any `mtp.*` tensor; none when it has none
  // (transformers' save_pretrained drops them while keeping the config key).
  std::vector<MtpWeights> mtp;
  // Keeps the mapped files and any converted copies alive for the WeightRefs above.
  std::shared_ptr<TensorStore> store;
  std::vector<std::shared_ptr<std::vector<float>>> owned_scales;
  // A reduced draft vocabulary (set_draft_vocabulary; docs/mtp.md): the MTP head scores only these ids, with
  // `draft_head` their rows of `head` (fp32, in draft_head_f32). Empty: the MTP head is the whole `head`.
  std::vector<int32_t> draft_vocab;
  WeightRef draft_head;
  std::shared_ptr<std::vector<float>> draft_head_f32;
  // The fp32 copy `head` points at after dequantize_head (empty otherwise).
  std::shared_ptr<std::vector<float>> head_f32;
};

// Loads and checks every tensor the config implies. Accepts the official DeepSeek names, the names transformers'
// save_pretrained writes, and transformers' in-memory names (see checkpoint_names.h). A missing, unexpected or
// wrongly shaped tensor, or an unsupported dtype, is an Error naming it. MTP layers (`mtp.<i>.*`): all or none, see
// ModelWeights::mtp.
ModelWeights load_weights(const ModelConfig& cfg, std::shared_ptr<TensorStore> store);

// The CPU backend reads every row of the vocabulary head for every token it samples, so with an FP8 or FP4 head
// (e.g. the demo model's FP8 tied embedding) dequantizing those rows dominated a decode step. This replaces a
// quantized `head` by an fp32 copy owned by the weights, holding exactly the values row_f32 gives (block scale ×
// code, in fp32), so logits do not change. It costs 4 bytes per head weight in memory. `embed` keeps the stored
// form (a lookup reads one row per token); an F32/BF16/F16 head is left as it is. Only for the CPU backend: a GPU
// backend uploads the stored matrices itself.
void dequantize_head(ModelWeights& w);

}  // namespace strata::model::v4
