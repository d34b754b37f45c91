#include "model/deepseek_v41/config.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace strata::model::v41 {

namespace {

using nlohmann::json;

const json* find(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

void read(const json& j, const char* key, int64_t& out) {
  if (const json* v = find(j, key)) {
    if (!v->is_number_integer()) fail("config.json: ", key, " must be an integer, found ", v->dump());
    out = v->get<int64_t>();
  }
}
void read(const json& j, const char* key, double& out) {
  if (const json* v = find(j, key)) {
    if (!v->is_number()) fail("config.json: ", key, " must be a number, found ", v->dump());
    out = v->get<double>();
  }
}
void read(const json& j, const char* key, bool& out) {
  if (const json* v = find(j, key)) {
    if (!v->is_boolean()) fail("config.json: ", key, " must be true or false, found ", v->dump());
    out = v->get<bool>();
  }
}
void read(const json& j, const char* key, std::string& out) {
  if (const json* v = find(j, key)) {
    if (!v->is_string()) fail("config.json: ", key, " must be a string, found ", v->dump());
    out = v->get<std::string>();
  }
}
bool read(const json& j, const char* key, std::vector<int64_t>& out) {
  const json* v = find(j, key);
  if (!v) return false;
  if (!v->is_array()) fail("config.json: ", key, " must be a list of integers, found ", v->dump());
  out.clear();
  for (const json& e : *v) {
    if (!e.is_number_integer()) fail("config.json: ", key, " must be a list of integers, found ", v->dump());
    out.push_back(e.get<int64_t>());
  }
  return true;
}

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

void positive(const char* key, int64_t v) {
  if (v < 1) fail("config.json: ", key, " is ", v, " (expected ≥ 1)");
}

RopeSpec read_rope(const json& j, double theta) {
  RopeSpec r;
  r.theta = theta;
  if (const json* t = find(j, "rope_type")) {
    if (!t->is_string()) fail("config.json: rope_type must be a string, found ", t->dump());
    r.type = t->get<std::string>();
  }
  if (r.type != "default" && r.type != "yarn")
    fail("config.json: rope_type '", r.type, "' (expected default or yarn)");
  read(j, "factor", r.factor);
  read(j, "beta_fast", r.beta_fast);
  read(j, "beta_slow", r.beta_slow);
  read(j, "attention_factor", r.attention_factor);
  read(j, "original_max_position_embeddings", r.original_max_position);
  read(j, "truncate", r.truncate);
  if (r.type == "yarn" && !(r.factor > 0)) fail("config.json: a YaRN rope needs factor > 0, found ", r.factor);
  return r;
}

}  // namespace

int64_t V41Config::kv_source_of(int64_t layer) const {
  int64_t best = -1;
  for (int64_t s : kv_source_layer_ids)
    if (s <= layer) best = std::max(best, s);
  return best;
}

int64_t V41Config::index_source_of(int64_t layer) const {
  int64_t best = -1;
  for (int64_t s : index_source_layer_ids)
    if (s <= layer) best = std::max(best, s);
  return best;
}

V41Config parse_v41_config(const json& config) {
  if (!config.is_object()) fail("config.json: expected an object");
  const json* text = &config;
  if (const json* t = find(config, "text_config")) {
    if (!t->is_object()) fail("config.json: text_config must be an object");
    text = t;
  } else if (const json* type = find(config, "model_type"); type && *type == "deepseek_v41") {
    fail("config.json: model_type deepseek_v41 without a text_config");
  }
  const json& j = *text;
  V41Config c;
  read(j, "vocab_size", c.vocab_size);
  read(j, "hidden_size", c.hidden_size);
  read(j, "num_hidden_layers", c.num_hidden_layers);
  read(j, "num_attention_heads", c.num_attention_heads);
  read(j, "head_dim", c.head_dim);
  read(j, "q_lora_rank", c.q_lora_rank);
  read(j, "qk_rope_head_dim", c.qk_rope_head_dim);
  read(j, "sliding_window", c.sliding_window);
  read(j, "max_position_embeddings", c.max_position_embeddings);
  read(j, "o_groups", c.o_groups);
  read(j, "o_lora_rank", c.o_lora_rank);
  read(j, "intermediate_size", c.moe_intermediate_size);  // an alias; moe_intermediate_size wins
  read(j, "moe_intermediate_size", c.moe_intermediate_size);
  read(j, "num_local_experts", c.n_routed_experts);
  read(j, "n_routed_experts", c.n_routed_experts);
  read(j, "num_experts_per_tok", c.num_experts_per_tok);
  read(j, "scoring_func", c.scoring_func);
  read(j, "gate_temp", c.gate_temp);
  read(j, "routed_scaling_factor", c.routed_scaling_factor);
  read(j, "swiglu_limit", c.swiglu_limit);
  read(j, "norm_topk_prob", c.norm_topk_prob);
  read(j, "hc_mult", c.hc_mult);
  read(j, "hc_sinkhorn_iters", c.hc_sinkhorn_iters);
  read(j, "hc_eps", c.hc_eps);
  read(j, "rms_norm_eps", c.rms_norm_eps);
  read(j, "index_n_heads", c.index_n_heads);
  read(j, "index_head_dim", c.index_head_dim);
  read(j, "index_topk", c.index_topk);
  read(j, "candidate_topk_blocks", c.candidate_topk_blocks);
  read(j, "candidate_block_size", c.candidate_block_size);
  read(j, "num_nextn_predict_layers", c.num_nextn_predict_layers);
  if (const json* eos = find(j, "eos_token_id")) {
    if (eos->is_number_integer()) c.eos_token_ids = {eos->get<int64_t>()};
    else read(j, "eos_token_id", c.eos_token_ids);
  }
  for (auto [key, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"num_hidden_layers", c.num_hidden_layers}, {"num_attention_heads", c.num_attention_heads},
                        {"head_dim", c.head_dim}, {"q_lora_rank", c.q_lora_rank}, {"sliding_window", c.sliding_window},
                        {"o_groups", c.o_groups}, {"o_lora_rank", c.o_lora_rank}, {"hc_mult", c.hc_mult},
                        {"moe_intermediate_size", c.moe_intermediate_size}, {"n_routed_experts", c.n_routed_experts},
                        {"num_experts_per_tok", c.num_experts_per_tok}, {"index_n_heads", c.index_n_heads},
                        {"index_head_dim", c.index_head_dim}, {"index_topk", c.index_topk},
                        {"candidate_block_size", c.candidate_block_size}})
    positive(key, v);
  if (c.num_nextn_predict_layers < 0) fail("config.json: num_nextn_predict_layers is ", c.num_nextn_predict_layers, " (expected ≥ 0)");
  if (c.num_experts_per_tok > c.n_routed_experts)
    fail("config.json: num_experts_per_tok ", c.num_experts_per_tok, " exceeds n_routed_experts ", c.n_routed_experts);
  if (c.qk_rope_head_dim < 2 || c.qk_rope_head_dim > c.head_dim || c.qk_rope_head_dim % 2)
    fail("config.json: qk_rope_head_dim ", c.qk_rope_head_dim, " (expected an even number of channels ≤ head_dim ", c.head_dim, ")");
  if (c.num_attention_heads % c.o_groups) fail("config.json: num_attention_heads ", c.num_attention_heads, " is not a multiple of o_groups ", c.o_groups);
  if (c.scoring_func != "sqrtsoftplus" && c.scoring_func != "softmax" && c.scoring_func != "sigmoid")
    fail("config.json: scoring_func '", c.scoring_func, "' (expected sqrtsoftplus, softmax or sigmoid)");

  // The layer schedule (§1.2).
  const int64_t n = c.num_hidden_layers, m = c.num_nextn_predict_layers;
  std::vector<int64_t> r;
  const std::vector<int64_t> release = [] {
    std::vector<int64_t> v = {0, 0};
    v.insert(v.end(), 18, 2);
    v.insert(v.end(), 20, 1);
    return v;
  }();
  if (!read(j, "compress_ratios", r)) {
    if (n == 40) {
      r = release;
    } else {
      const int64_t slide = std::min<int64_t>(2, n), enc = std::max<int64_t>(0, (n - slide + 1) / 2);
      r.assign(static_cast<size_t>(slide), 0);
      r.insert(r.end(), static_cast<size_t>(enc), 2);
      r.insert(r.end(), static_cast<size_t>(n - slide - enc), 1);
    }
  }
  if (static_cast<int64_t>(r.size()) < n || static_cast<int64_t>(r.size()) > n + m)
    fail("config.json: compress_ratios has ", r.size(), " entries (expected ", n, " to ", n + m, ": one per layer, then the DSpark layers')");
  for (int64_t v : r)
    if (v != 0 && v != 1 && v != 2) fail("config.json: compress_ratios holds ", v, " (expected 0, 1 or 2)");
  r.resize(static_cast<size_t>(n + m), 0);
  c.compress_ratios = r;
  const std::vector<int64_t> backbone(r.begin(), r.begin() + n);
  if (!read(j, "kv_source_layer_ids", c.kv_source_layer_ids)) {
    if (backbone == release) {
      c.kv_source_layer_ids = {2, 8, 14, 20};
    } else {
      for (int64_t i = 0; i < n; ++i)
        if (backbone[static_cast<size_t>(i)] > 0 && (i == 0 || backbone[static_cast<size_t>(i - 1)] != backbone[static_cast<size_t>(i)]))
          c.kv_source_layer_ids.push_back(i);
    }
  }
  if (!read(j, "index_source_layer_ids", c.index_source_layer_ids))
    c.index_source_layer_ids = c.kv_source_layer_ids == std::vector<int64_t>{2, 8, 14, 20}
                                   ? std::vector<int64_t>{2, 8, 14, 20, 24, 28, 32, 36}
                                   : c.kv_source_layer_ids;
  c.candidate_source_layer_id = c.kv_source_layer_ids.empty() ? -1 : c.kv_source_layer_ids.back();
  read(j, "candidate_source_layer_id", c.candidate_source_layer_id);
  if (c.candidate_source_layer_id >= 0 && !contains(c.index_source_layer_ids, c.candidate_source_layer_id))
    fail("config.json: candidate_source_layer_id ", c.candidate_source_layer_id, " is not an index source");
  if (!read(j, "dspark_target_layer_ids", c.dspark_target_layer_ids)) {
    for (int64_t i = 0; i < n; ++i)
      if (!contains(c.kv_source_layer_ids, i)) c.dspark_target_layer_ids.push_back(i);
    if (c.dspark_target_layer_ids.size() > 3)
      c.dspark_target_layer_ids.erase(c.dspark_target_layer_ids.begin(), c.dspark_target_layer_ids.end() - 3);
  }
  const auto has_source_at_or_before = [&](int64_t layer) { return c.kv_source_of(layer) >= 0; };
  for (int64_t s : c.kv_source_layer_ids)
    if (s < 0 || s >= n || backbone[static_cast<size_t>(s)] == 0)
      fail("config.json: kv_source_layer_ids holds ", s, " (expected a layer below ", n, " with a compress ratio > 0)");
  for (int64_t s : c.index_source_layer_ids)
    if (s < 0 || s >= n || backbone[static_cast<size_t>(s)] == 0 || !has_source_at_or_before(s))
      fail("config.json: index_source_layer_ids holds ", s, " (expected a layer with a compress ratio > 0 at or after a kv source)");
  for (int64_t i = 0; i < n; ++i)
    if (backbone[static_cast<size_t>(i)] > 0 && !has_source_at_or_before(i))
      fail("config.json: layer ", i, " has compress ratio ", backbone[static_cast<size_t>(i)], " but no kv source at or before it");

  // RoPE (§1.3): "main" for sliding-window layers, "compress" (rope_scaling's YaRN) for the others; an explicit
  // rope_parameters with both entries is taken as it is.
  double theta = 10000.0, compress_theta = 160000.0;
  read(j, "rope_theta", theta);
  read(j, "compress_rope_theta", compress_theta);
  const json* params = find(j, "rope_parameters");
  if (params && params->is_object() && find(*params, "main") && find(*params, "compress")) {
    double mt = theta, ct = compress_theta;
    read(params->at("main"), "rope_theta", mt);
    read(params->at("compress"), "rope_theta", ct);
    c.main_rope = read_rope(params->at("main"), mt);
    c.compress_rope = read_rope(params->at("compress"), ct);
  } else {
    c.main_rope.theta = theta;
    const json* scaling = find(j, "rope_scaling");
    if (scaling && !scaling->is_object()) fail("config.json: rope_scaling must be an object, found ", scaling->dump());
    c.compress_rope = read_rope(scaling ? *scaling : json::object(), compress_theta);
  }

  // Engram (§2).
  read(j, "engram_layer_ids", c.engram.layer_ids);
  read(j, "engram_vocab_size", c.engram.vocab_size);
  read(j, "engram_max_ngram_size", c.engram.max_ngram);
  read(j, "engram_n_heads", c.engram.heads);
  read(j, "engram_head_dim", c.engram.head_dim);
  read(j, "engram_compressed_vocab_size", c.engram.compressed_vocab);
  read(j, "engram_pad_token_id", c.engram_pad_id);
  read(j, "engram_pad_id", c.engram_pad_id);
  for (int64_t l : c.engram.layer_ids)
    if (l < 0 || l >= n) fail("config.json: engram_layer_ids holds ", l, " (expected a layer below ", n, ")");
  if (c.engram_pad_id < 0 || c.engram_pad_id >= c.vocab_size)
    fail("config.json: engram_pad_id ", c.engram_pad_id, " is outside the vocabulary");
  c.engram_layout = make_engram_layout(c.engram);
  std::vector<int64_t> rows;
  for (const EngramLayerLayout& l : c.engram_layout) rows.push_back(l.rows);
  std::vector<int64_t> given;
  if (read(j, "engram_num_embeddings", given) && given != std::vector<int64_t>(given.size(), 0) && given != rows)
    fail("config.json: engram_num_embeddings ", nlohmann::json(given).dump(), " differs from the tables the primes give, ",
         nlohmann::json(rows).dump());
  c.engram_num_embeddings = rows;
  return c;
}

std::vector<float> rope_inv_freq(const RopeSpec& rope, int64_t rotary_dim, int64_t max_position) {
  if (rotary_dim < 2 || rotary_dim % 2) fail("rope: a rotary dimension of ", rotary_dim, " (expected an even number ≥ 2)");
  const auto half = static_cast<size_t>(rotary_dim / 2);
  const auto base = static_cast<float>(rope.theta), dim = static_cast<float>(rotary_dim);
  std::vector<float> pos_freq(half), out(half);
  for (size_t i = 0; i < half; ++i) pos_freq[i] = std::pow(base, static_cast<float>(2 * i) / dim);
  if (rope.type != "yarn") {
    for (size_t i = 0; i < half; ++i) out[i] = 1.0f / pos_freq[i];
    return out;
  }
  const double orig = static_cast<double>(rope.original_max_position > 0 ? rope.original_max_position : max_position);
  const auto corr = [&](double r) {
    return static_cast<double>(rotary_dim) * std::log(orig / (r * 2 * std::numbers::pi)) / (2 * std::log(rope.theta));
  };
  double low = corr(rope.beta_fast), high = corr(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(rotary_dim - 1));
  if (low == high) high += 0.001;
  const auto factor = static_cast<float>(rope.factor);
  for (size_t i = 0; i < half; ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low), 0.0f, 1.0f);
    const float extra = 1.0f - ramp;
    const float inv_extra = 1.0f / pos_freq[i], inv_inter = 1.0f / (factor * pos_freq[i]);
    out[i] = inv_inter * (1.0f - extra) + inv_extra * extra;
  }
  return out;
}

}  // namespace strata::model::v41
