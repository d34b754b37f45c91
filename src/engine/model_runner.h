#pragma once
// The engine's one door into the model: a StepPlan in, a StepOutput out. It turns the plan's spans into the
// model's chunks (each span's state from its pool slot), describes the sampling stage (which logits rows come home
// raw, which get penalties, which get a pick where they were computed), runs the step, and reads the answers: the
// picked ids, and logprobs from the raw rows (nano-vllm's ModelRunner.run, vLLM's GPUModelRunner.execute_model).
#include "engine/step_plan.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/state_pool.h"

namespace strata::engine {

class ModelRunner {
 public:
  // `observe`, if set, sees every step's residual streams after every layer (debugging parity: --dump-hidden).
  ModelRunner(const model::v4::Model& model, model::v4::StatePool& pool, model::v4::LayerObserver observe = {});

  // Runs the plan's spans as one forward step. Throws strata::Error when the plan does not match the states (a
  // span's start differs from the tokens its slot holds, a slot used twice, a sampling span without settings).
  StepOutput execute(const StepPlan& plan);

 private:
  const model::v4::Model& model_;
  model::v4::StatePool& pool_;
  model::v4::LayerObserver observe_;
};

}  // namespace strata::engine
