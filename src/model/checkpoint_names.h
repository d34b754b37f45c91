#pragma once
// DeepSeek-V4 tensors go by three spellings: the official release's (`layers.0.attn.wq_a.weight`), transformers'
// in-memory module names (`model.layers.0.self_attn.q_a_proj.weight`), and whatever transformers' save_pretrained
// writes. Strata's canonical names are the official ones; this maps them to the others.
#include <string>
#include <vector>

namespace strata::model {

// transformers' name for an official name: the renames of transformers' conversion_mapping.py ("deepseek_v4"),
// applied in the same order, without the `model.` prefix.
std::string transformers_name(const std::string& official);

// What transformers' save_pretrained writes for `official`: it prefixes `model.` (except lm_head) and undoes the
// renames in reverse order, which leaves e.g. `model.embed_tokens.weight` and turns `kv_norm` into `attn.norm`.
std::string saved_name(const std::string& official);

// Every spelling under which `official` may appear in a checkpoint, most likely first.
std::vector<std::string> name_aliases(const std::string& official);

}  // namespace strata::model
