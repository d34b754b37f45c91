#pragma once
// The engine's one door into the model: a StepPlan in, a StepOutput out. It turns the plan's spans into the
// model's chunks (each span's state from its pool slot), describes the sampling stage (which logits rows come home
// raw, which get penalties, which get a pick where they were computed), runs the step, and reads the answers: the
// picked ids, and logprobs from the raw rows (nano-vllm's ModelRunner.run, vLLM's GPUModelRunner.execute_model).
#include "engine/step_plan.h"
#include "model/model.h"
#include "model/state_pool.h"

namespace strata::engine {

class ModelRunner {
 public:
  // `observe`, if set, sees every step's residual streams after every layer (debugging parity: --dump-hidden).
  ModelRunner(const model::Model& model, model::StatePool& pool, model::LayerObserver observe = {});

  // Runs the plan's spans as one forward step. Throws strata::Error when the plan does not match the states (a
  // span's start differs from the tokens its slot holds, a slot used twice, a sampling span without settings).
  StepOutput execute(const StepPlan& plan);

 private:
  const model::Model& model_;
  model::StatePool& pool_;
  model::LayerObserver observe_;
};

}  // namespace strata::engine
