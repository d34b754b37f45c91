#pragma once
// How engine/, server/ and cli/ get a model of the DeepSeek family without naming its implementation: config.json's
// model_type (ModelConfig::variant, model_variant.h) picks it here, the one place above a model's own folder that
// does. Presets and random weights (strata model init, strata bench --preset) come through here too.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/device.h"
#include "model/model.h"

namespace strata::model {

// The model in checkpoint directory `dir` (config.json + safetensors), every tensor checked, on `device`.
// `max_rollback`: how many of its latest tokens a sequence's state can drop again (Model::rollback).
// `draft_vocabulary`: use the checkpoint's reduced draft vocabulary (draft_vocab.json) if it has one; false makes
// the MTP head score the whole vocabulary (checking the layer against a reference, `strata model mtp-logits`).
std::unique_ptr<Model> open_checkpoint(const std::string& dir, Device device = Device::Cpu,
                                       Precision precision = Precision::Bf16, CudaSwitches cuda = {},
                                       int64_t max_rollback = 1, bool draft_vocabulary = true);

// Named shapes (tiny, small, flash, …) and their configs; `layers` > 0 overrides the layer count.
std::vector<std::string> preset_names();
ModelConfig preset_config(const std::string& name, int64_t layers = 0);

// Random weights of `config`'s shape (matrices as `matrix_dtype`: BF16, F32 or F8_E4M3 with block scales), written
// as a checkpoint that open_checkpoint reads. `fast_fill`: the benchmarks' fast uniform values (random_model's)
// instead of the exact draws tests are pinned to, for checkpoints of real V4-Flash layers.
void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype,
                             bool fast_fill = false);

// The same in memory, as a model: `config` is the checkpoint's config (with its quantization for FP8).
struct RandomModel {
  std::unique_ptr<Model> model;
  ModelConfig config;
  double weights_seconds = 0, model_seconds = 0;  // made on the host; built on the device
};
RandomModel random_model(const ModelConfig& config, uint64_t seed, DType matrix_dtype, Device device,
                         Precision precision, CudaSwitches cuda = {});

}  // namespace strata::model
