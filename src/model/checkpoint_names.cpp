#include "model/checkpoint_names.h"

#include <algorithm>
#include <array>

namespace strata::model {

namespace {

enum class Match { Anywhere, Suffix, Whole };
struct Rename {
  Match match;
  const char* from;
  const char* to;
};

// Mirrors transformers 5.17 conversion_mapping.py "deepseek_v4" (official → transformers), in its order.
constexpr std::array<Rename, 32> kRenames = {{
    {Match::Anywhere, ".attn.", ".self_attn."},
    {Match::Anywhere, ".ffn.", ".mlp."},
    {Match::Anywhere, ".indexer.compressor.", ".compressor.indexer."},
    {Match::Whole, "embed.weight", "embed_tokens.weight"},
    {Match::Whole, "head.weight", "lm_head.weight"},
    {Match::Whole, "hc_head_fn", "hc_head.hc_fn"},
    {Match::Whole, "hc_head_base", "hc_head.hc_base"},
    {Match::Whole, "hc_head_scale", "hc_head.hc_scale"},
    {Match::Anywhere, ".attn_norm.", ".input_layernorm."},
    {Match::Anywhere, ".ffn_norm.", ".post_attention_layernorm."},
    {Match::Suffix, ".hc_attn_fn", ".attn_hc.fn"},
    {Match::Suffix, ".hc_attn_base", ".attn_hc.base"},
    {Match::Suffix, ".hc_attn_scale", ".attn_hc.scale"},
    {Match::Suffix, ".hc_ffn_fn", ".ffn_hc.fn"},
    {Match::Suffix, ".hc_ffn_base", ".ffn_hc.base"},
    {Match::Suffix, ".hc_ffn_scale", ".ffn_hc.scale"},
    {Match::Suffix, ".attn_sink", ".sinks"},
    {Match::Anywhere, ".indexer.weights_proj.", ".compressor.indexer.scorer.weights_proj."},
    {Match::Anywhere, ".indexer.wq_b.", ".compressor.indexer.q_b_proj."},
    {Match::Anywhere, ".norm.", ".kv_norm."},
    {Match::Suffix, ".ape", ".position_bias"},
    {Match::Anywhere, ".wq_a.", ".q_a_proj."},
    {Match::Anywhere, ".self_attn.wq_b.", ".self_attn.q_b_proj."},
    {Match::Anywhere, ".wkv.", ".kv_proj."},
    {Match::Anywhere, ".wgate.", ".gate_proj."},
    {Match::Anywhere, ".wo_a.", ".o_a_proj."},
    {Match::Anywhere, ".wo_b.", ".o_b_proj."},
    {Match::Anywhere, ".q_norm.", ".q_a_norm."},
    {Match::Suffix, ".gate.bias", ".gate.e_score_correction_bias"},
    {Match::Anywhere, ".shared_experts.w1.", ".shared_experts.gate_proj."},
    {Match::Anywhere, ".shared_experts.w2.", ".shared_experts.down_proj."},
    {Match::Anywhere, ".shared_experts.w3.", ".shared_experts.up_proj."},
}};

void rename_forward(const Rename& r, std::string& name) {
  const std::string from = r.from, to = r.to;
  switch (r.match) {
    case Match::Whole:
      if (name == from) name = to;
      return;
    case Match::Suffix:
      if (name.size() >= from.size() && name.compare(name.size() - from.size(), from.size(), from) == 0)
        name.replace(name.size() - from.size(), from.size(), to);
      return;
    case Match::Anywhere:
      for (size_t at = name.find(from); at != std::string::npos; at = name.find(from, at + to.size()))
        name.replace(at, from.size(), to);
      return;
  }
}

void rename_backward(const Rename& r, std::string& name) {
  rename_forward(Rename{r.match, r.to, r.from}, name);
}

}  // namespace

std::string transformers_name(const std::string& official) {
  std::string name = official;
  for (const Rename& r : kRenames) rename_forward(r, name);
  return name;
}

std::string saved_name(const std::string& official) {
  const std::string hf = transformers_name(official);
  std::string name = hf == "lm_head.weight" ? hf : "model." + hf;
  for (auto r = kRenames.rbegin(); r != kRenames.rend(); ++r) rename_backward(*r, name);
  return name;
}

std::vector<std::string> name_aliases(const std::string& official) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  const std::string hf = transformers_name(official);
  add(official);
  add(saved_name(official));
  add(hf);
  add("model." + hf);
  add("model." + official);
  return out;
}

}  // namespace strata::model
