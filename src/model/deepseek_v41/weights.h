#pragma once
// DeepSeek-V4.1's weights for the fp32 CPU reference forward: every tensor of a checkpoint directory
// (config.json + model.safetensors, the checkpoint names of docs/deepseek_v4_1_reference.md §10) copied into fp32
// matrices, plus the config and the Engram addressing (hash layout, normalised-token map) the forward needs.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/deepseek_v41/config.h"
#include "model/deepseek_v41/engram.h"

namespace strata::model::v41 {

struct V41Weights {
  V41Config config;
  // By checkpoint name; a 1-D tensor is one row, an N-D one [shape[0], product of the rest].
  std::map<std::string, Mat> tensors;
  // One layout per Engram layer (config order). The multipliers are the config's extension key
  // `engram_hash_multipliers` when present (the reference writes the values it used), else make_engram_layout's.
  std::vector<EngramLayerLayout> engram_layout;
  // token id -> normalised (compressed) id: the config's extension key `engram_token_map`, else the identity
  // (allowed only when the compressed vocabulary is the whole vocabulary).
  std::vector<int64_t> engram_token_map;

  // The named tensor; throws naming it when the checkpoint lacks it.
  const Mat& at(const std::string& name) const;
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
};

// Loads `dir`/config.json and every tensor of `dir` (F32 only: this is the fp32 reference path). Throws naming the
// file or tensor on a missing file, a non-F32 tensor or an inconsistent Engram map.
V41Weights load_v41_weights(const std::string& dir);

}  // namespace strata::model::v41
