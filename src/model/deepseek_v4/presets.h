#pragma once
#include <string>
#include <vector>

#include "model/config.h"

namespace strata::model::v4 {

// Named V4 shapes for `strata model init`:
//   tiny   — every layer type (sliding, CSA, HCA), hash and top-k MoE, hc_mult 4, o_groups 2, YaRN; tests.
//   small  — ~125M parameters, the tiny schedule at 8 layers; CPU benchmarks.
//   flash  — DeepSeek-V4-Flash's real layer shapes with a chosen number of layers; benchmarks.
std::vector<std::string> preset_names();
// `layers` overrides num_hidden_layers (0 keeps the preset's); the layer schedules are cut or extended to match.
ModelConfig preset_config(const std::string& name, int64_t layers = 0);

}  // namespace strata::model::v4
