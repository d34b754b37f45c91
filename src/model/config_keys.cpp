// The top-level keys a DeepSeek-V4 config.json may hold. Two spellings of the same model reach us: transformers'
// DeepseekV4Config (layer_types, compress_rates, rope_parameters, mlp_layer_types) and DeepSeek's own config.json
// next to the weights (compress_ratios, compress_rate_csa/hca, num_hash_layers, qk_rope_head_dim, rope_scaling,
// V3-lineage routing keys). Both lists are read by tools/demo_model/model_config.py (strata_config_keys), so an
// export drops what this parser would refuse; keep their names and the `name[] = {...};` shape.
#include "model/config_sections.h"

#include <string_view>

namespace strata::model::config_json {

namespace {

// Keys of the DeepseekV4Config dataclass (transformers 5.17) that this parser reads.
constexpr std::string_view kV4Fields[] = {
    "model_type", "vocab_size", "hidden_size", "moe_intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "q_lora_rank", "num_experts_per_tok", "n_routed_experts", "n_shared_experts",
    "scoring_func", "norm_topk_prob", "routed_scaling_factor", "max_position_embeddings", "rope_theta",
    "layer_types", "compress_rates", "compress_rope_theta", "hc_mult", "hc_sinkhorn_iters", "hc_eps",
    "mlp_layer_types", "swiglu_limit", "sliding_window", "o_groups", "o_lora_rank", "index_n_heads",
    "index_head_dim", "index_topk", "num_nextn_predict_layers", "hidden_act", "initializer_range", "rms_norm_eps",
    "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_parameters",
    "partial_rotary_factor", "attention_bias", "mlp_bias",
    // Dataclass fields that only matter for training / HF runtime: type-checked, then ignored.
    "use_cache", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "attention_dropout",
    // Legacy spellings that __post_init__ (or PreTrainedConfig) folds into the fields above.
    "compress_ratios", "compress_rate_csa", "compress_rate_hca", "num_hash_layers", "qk_rope_head_dim",
    "rope_scaling",
    // attribute_map aliases: PreTrainedConfig.__setattr__ writes them through to the real field.
    "num_local_experts", "intermediate_size",
    // Not V4 dataclass fields but parsed here because the weight loader needs them.
    "quantization_config", "expert_dtype", "dtype", "torch_dtype",
    // DeepSeek's own config.json carries these; accepted only with the value V4 actually has (checked below).
    "first_k_dense_replace", "moe_layer_freq",
};

// Extra top-level keys that are accepted and ignored. transformers' PreTrainedConfig stores any unknown key as a
// plain attribute, so "what transformers accepts" is everything; this list is the subset real files are known to
// carry: the generic PreTrainedConfig fields, the legacy (v4.x) generic fields and generation parameters HF still
// writes into old config.json files, and DeepSeek routing/parallelism knobs that DeepseekV4 modelling ignores.
// None changes the forward pass. Any key outside this list and kV4Fields is an error, so a typo such as
// "num_hiden_layers" cannot silently fall back to a default. Extend this list (with a reason) when a real
// checkpoint needs it.
constexpr std::string_view kIgnoredExtraKeys[] = {
    // PreTrainedConfig (transformers 5.x) fields and runtime attributes.
    "transformers_version", "architectures", "output_hidden_states", "output_attentions", "return_dict",
    "use_return_dict", "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "num_labels",
    "problem_type", "auto_map", "_name_or_path", "name_or_path", "_commit_hash", "attn_implementation",
    "_attn_implementation", "_attn_implementation_internal", "experts_implementation",
    "_experts_implementation_internal", "initializer_factor",
    // Generic fields transformers 4.x wrote into every config.json.
    "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "pruned_heads", "torchscript",
    "use_bfloat16", "tf_legacy_loss", "is_decoder", "add_cross_attention", "cross_attention_hidden_size",
    "tie_encoder_decoder", "sep_token_id", "decoder_start_token_id",
    // Generation parameters: PreTrainedConfig.__post_init__ pops these (they belong to generation_config.json).
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    // DeepSeek official configs (V3 lineage): group-limited routing / aux-loss / parallelism knobs. DeepseekV4
    // modelling never reads them (routing is plain top-k over score + e_score_correction_bias).
    "n_group", "topk_group", "topk_method", "ep_size", "aux_loss_alpha", "seq_aux", "pretraining_tp",
};

}  // namespace

void check_known_keys(const ConfigReader& r, const json& j) {
  for (const auto& [key, value] : j.items()) {
    if (!contains(kV4Fields, key) && !contains(kIgnoredExtraKeys, key))
      r.bad(key, "unknown key for model_type deepseek_v4 (not a DeepseekV4Config field, a legacy alias, or a ",
            "known generic transformers/DeepSeek key)");
  }
}

}  // namespace strata::model::config_json
