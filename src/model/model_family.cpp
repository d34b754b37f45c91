#include "model/model_family.h"

#include <chrono>

#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/presets.h"
#include "model/deepseek_v4/random_init.h"
#include "model/model_variant.h"

namespace strata::model {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::unique_ptr<Model> open_checkpoint(const std::string& dir, Device device, Precision precision, CudaSwitches cuda,
                                       int64_t max_rollback, bool draft_vocabulary) {
  const ModelConfig cfg = load_config(dir);
  return with_model_variant(cfg.variant, [&](auto variant) -> std::unique_ptr<Model> {
    if constexpr (decltype(variant)::value == ModelVariant::DeepSeekV4)
      return std::make_unique<v4::Model>(v4::load_model(dir, device, precision, cuda, max_rollback, draft_vocabulary));
  });
}

std::vector<std::string> preset_names() { return v4::preset_names(); }

ModelConfig preset_config(const std::string& name, int64_t layers) { return v4::preset_config(name, layers); }

void write_random_checkpoint(const ModelConfig& config, const std::string& dir, uint64_t seed, DType matrix_dtype,
                             bool fast_fill) {
  with_model_variant(config.variant, [&](auto variant) {
    if constexpr (decltype(variant)::value == ModelVariant::DeepSeekV4)
      v4::write_random_checkpoint(config, dir, seed, matrix_dtype,
                                  fast_fill ? v4::RandomFill::Fast : v4::RandomFill::Exact);
  });
}

RandomModel random_model(const ModelConfig& config, uint64_t seed, DType matrix_dtype, Device device,
                         Precision precision, CudaSwitches cuda) {
  return with_model_variant(config.variant, [&](auto variant) -> RandomModel {
    if constexpr (decltype(variant)::value == ModelVariant::DeepSeekV4) {
      RandomModel out;
      out.config = v4::random_checkpoint_config(config, matrix_dtype);
      const auto t0 = std::chrono::steady_clock::now();
      v4::ModelWeights weights = v4::random_weights(out.config, seed, matrix_dtype);
      out.weights_seconds = seconds_since(t0);
      const auto t1 = std::chrono::steady_clock::now();
      out.model = std::make_unique<v4::Model>(out.config, std::move(weights), device, precision, cuda);
      out.model_seconds = seconds_since(t1);
      return out;
    }
  });
}

}  // namespace strata::model
