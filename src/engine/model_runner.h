#pragma once
// The engine's one door into the model: a StepPlan in, a StepOutput out. It turns the plan's spans into the
// model's chunks (each span's state from its pool slot), describes the sampling stage (which logits rows come home
// raw, which get penalties, which get a pick where they were computed), runs the step, and reads the answers: the
// picked ids, and logprobs from the raw rows (nano-vllm's ModelRunner.run, vLLM's GPUModelRunner.execute_model).
#include <cstddef>
#include <optional>
#include <vector>

#include "engine/step_plan.h"
#include "model/model.h"
#include "model/state_pool.h"

namespace strata::engine {

// Structured outputs: the allowed-token masks of some of a step's sampling spans, built while the step runs. The
// model asks for them once, after it has queued the forward and before its sampling stage applies them, so on a GPU
// the CPU builds them while the device computes (model/logits_stage.h, LogitsStage::late_masks).
struct LateSpanMasks {
  // The plan's spans (indices, increasing) whose mask comes late (their SpanSampling::allowed is null).
  std::vector<size_t> spans = {};
  // One mask per listed span, in that order (null: that span has no mask at this point).
  model::LateMasks build = {};
};

class ModelRunner {
 public:
  // `observe`, if set, sees every step's residual streams after every layer (debugging parity: --dump-hidden).
  ModelRunner(const model::Model& model, model::StatePool& pool, model::LayerObserver observe = {});

  // Runs the plan's spans as one forward step; `late`, if it lists spans, gives their masks during the step. Throws
  // strata::Error when the plan does not match the states (a span's start differs from the tokens its slot holds, a
  // slot used twice, a sampling span without settings, a late mask for a span that does not sample or has a mask
  // already); an exception from late.build leaves with it.
  StepOutput execute(const StepPlan& plan, const LateSpanMasks& late = {});
  // Benchmarks only (SpeculativeConfig::forced_acceptance): verification accepts each draft with this probability.
  void force_acceptance(std::optional<double> rate) { forced_acceptance_ = rate; }
  // Sampled rows check their drafts by rejection sampling (true) or by matching their own draw (false, default).
  void verify_by_rejection(bool on) { rejection_ = on; }
  // A verify span's rejected rows' streams come home too (SpanOutput::rejected_streams), for a catch-up over every
  // verified row (SpeculativeConfig::catch_up_all_rows); otherwise they are not copied.
  void keep_rejected_streams(bool on) { keep_rejected_ = on; }

 private:
  const model::Model& model_;
  model::StatePool& pool_;
  model::LayerObserver observe_;
  std::optional<double> forced_acceptance_;
  bool rejection_ = false;
  bool keep_rejected_ = false;
};

}  // namespace strata::engine
