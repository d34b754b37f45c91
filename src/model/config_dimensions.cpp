// The network's sizes and scalar settings that belong to no bigger section: vocabulary, width, depth, attention
// (heads, q/o low-rank projections, sliding window), the Lightning Indexer, the mHC residual streams, norms, MTP
// depth, token ids, and the training-only fields transformers carries. Positivity and cross-field checks are in
// config_checks.cpp.
#include "model/config_sections.h"

namespace strata::model::config_json {

void read_dimensions(const ConfigReader& r, const json& j, ModelConfig& c) {
  c.vocab_size = int_or(r, j, "vocab_size", c.vocab_size);
  c.hidden_size = int_or(r, j, "hidden_size", c.hidden_size);
  c.num_hidden_layers = int_or(r, j, "num_hidden_layers", c.num_hidden_layers);
  c.max_position_embeddings = int_or(r, j, "max_position_embeddings", c.max_position_embeddings);

  // Attention: shared-KV MQA with a low-rank q and a grouped low-rank output projection.
  c.num_attention_heads = int_or(r, j, "num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = int_or(r, j, "num_key_value_heads", c.num_key_value_heads);
  c.head_dim = int_or(r, j, "head_dim", c.head_dim);
  c.q_lora_rank = int_or(r, j, "q_lora_rank", c.q_lora_rank);
  c.sliding_window = int_or(r, j, "sliding_window", c.sliding_window);
  c.o_groups = int_or(r, j, "o_groups", c.o_groups);
  c.o_lora_rank = int_or(r, j, "o_lora_rank", c.o_lora_rank);
  c.attention_bias = bool_or(r, j, "attention_bias", c.attention_bias);

  // The Lightning Indexer of CSA layers.
  c.index_n_heads = int_or(r, j, "index_n_heads", c.index_n_heads);
  c.index_head_dim = int_or(r, j, "index_head_dim", c.index_head_dim);
  c.index_topk = int_or(r, j, "index_topk", c.index_topk);

  // Manifold-constrained hyper-connections: hc_mult residual streams mixed by Sinkhorn-normalised matrices.
  c.hc_mult = int_or(r, j, "hc_mult", c.hc_mult);
  c.hc_sinkhorn_iters = int_or(r, j, "hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  c.hc_eps = number_or(r, j, "hc_eps", c.hc_eps);

  c.num_nextn_predict_layers = int_or(r, j, "num_nextn_predict_layers", c.num_nextn_predict_layers);
  c.hidden_act = string_or(r, j, "hidden_act", c.hidden_act);
  c.rms_norm_eps = number_or(r, j, "rms_norm_eps", c.rms_norm_eps);
  c.initializer_range = number_or(r, j, "initializer_range", c.initializer_range);
  c.tie_word_embeddings = bool_or(r, j, "tie_word_embeddings", c.tie_word_embeddings);

  c.pad_token_id = nullable_int_or(r, j, "pad_token_id", c.pad_token_id);
  c.bos_token_id = nullable_int_or(r, j, "bos_token_id", c.bos_token_id);
  if (const json* eos = find(j, "eos_token_id")) {
    c.eos_token_ids.clear();
    if (eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i)
        c.eos_token_ids.push_back(r.as_int((*eos)[i], element("eos_token_id", i)));
    } else if (!eos->is_null()) {
      if (!eos->is_number_integer())
        r.bad("eos_token_id", "expected an integer, a list of integers or null, found ", describe(*eos));
      c.eos_token_ids.push_back(r.as_int(*eos, "eos_token_id"));
    }
  }

  // Training / HF-runtime fields: checked for type so a malformed file still fails, otherwise unused.
  bool_or(r, j, "use_cache", true);
  bool_or(r, j, "output_router_logits", false);
  number_or(r, j, "router_aux_loss_coef", 0.0);
  number_or(r, j, "router_jitter_noise", 0.0);
  number_or(r, j, "attention_dropout", 0.0);
}

}  // namespace strata::model::config_json
