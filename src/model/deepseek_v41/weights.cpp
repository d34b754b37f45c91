// Loading of V4.1's fp32 checkpoints for the CPU reference forward (see weights.h).
#include "model/deepseek_v41/weights.h"

#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/safetensors.h"

namespace strata::model::v41 {

const Mat& V41Weights::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) fail("v41 weights: tensor '", name, "' is missing from the checkpoint");
  return it->second;
}

namespace {

Mat to_mat(const TensorView& t) {
  if (t.dtype != DType::F32) fail("v41 weights: tensor '", t.name, "' in ", t.file, " is not F32 (the CPU reference reads fp32 only)");
  int64_t rows = 1, cols = 1;
  if (t.shape.size() == 1) {
    cols = t.shape[0];
  } else if (!t.shape.empty()) {
    rows = t.shape[0];
    for (size_t i = 1; i < t.shape.size(); ++i) cols *= t.shape[i];
  }
  Mat m(rows, cols);
  std::memcpy(m.v.data(), t.data, m.v.size() * sizeof(float));
  return m;
}

}  // namespace

V41Weights load_v41_weights(const std::string& dir) {
  const std::string config_path = dir + "/config.json";
  std::ifstream in(config_path);
  if (!in) fail("v41 weights: cannot open ", config_path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("v41 weights: ", config_path, " is not valid JSON: ", e.what());
  }
  V41Weights w;
  w.config = parse_v41_config(j);
  const nlohmann::json& text = j.contains("text_config") && j["text_config"].is_object() ? j["text_config"] : j;
  const V41Config& c = w.config;

  w.engram_layout = c.engram_layout;
  if (text.contains("engram_hash_multipliers") && !text["engram_hash_multipliers"].is_null()) {
    const auto given = text["engram_hash_multipliers"].get<std::vector<std::vector<int64_t>>>();
    if (given.size() != w.engram_layout.size())
      fail("v41 weights: engram_hash_multipliers has ", given.size(), " rows for ", w.engram_layout.size(), " Engram layers");
    for (size_t i = 0; i < given.size(); ++i) {
      if (given[i].size() != w.engram_layout[i].multipliers.size())
        fail("v41 weights: engram_hash_multipliers row ", i, " has ", given[i].size(), " values, expected ",
             w.engram_layout[i].multipliers.size());
      w.engram_layout[i].multipliers = given[i];
    }
  }
  if (text.contains("engram_token_map") && !text["engram_token_map"].is_null()) {
    w.engram_token_map = text["engram_token_map"].get<std::vector<int64_t>>();
    if (static_cast<int64_t>(w.engram_token_map.size()) != c.vocab_size)
      fail("v41 weights: engram_token_map has ", w.engram_token_map.size(), " entries for a vocabulary of ", c.vocab_size);
    const std::set<int64_t> distinct(w.engram_token_map.begin(), w.engram_token_map.end());
    if (static_cast<int64_t>(distinct.size()) != c.engram.compressed_vocab)
      fail("v41 weights: engram_token_map has ", distinct.size(), " distinct ids, expected engram_compressed_vocab_size ",
           c.engram.compressed_vocab);
  } else if (!c.engram.layer_ids.empty()) {
    if (c.engram.compressed_vocab != c.vocab_size)
      fail("v41 weights: Engram needs engram_token_map (the normalised-vocabulary map) when engram_compressed_vocab_size ",
           c.engram.compressed_vocab, " differs from vocab_size ", c.vocab_size);
    for (int64_t t = 0; t < c.vocab_size; ++t) w.engram_token_map.push_back(t);
  }

  const TensorStore store = TensorStore::open(dir);
  for (const auto& [name, view] : store.tensors()) w.tensors.emplace(name, to_mat(view));
  return w;
}

}  // namespace strata::model::v41
