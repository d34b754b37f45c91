#pragma once
// A loaded DeepSeek-V4 model on one backend (CPU reference or CUDA): the forward pass of forward.h, state creation.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/deepseek_v4/fingerprint.h"
#include "model/deepseek_v4/forward.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/state_layout.h"
#include "model/deepseek_v4/weights.h"

namespace strata::model::v4 {

enum class Device { Cpu, Cuda };
// The arithmetic of a GPU backend's matrix products. Bf16: weights and activations rounded to bf16, fp32
// accumulation (the product). Fp32: fp32 weights and activations, fp32 arithmetic — the CPU reference's numbers up
// to summation order, so whole-model checks can demand agreement even where a discrete choice (the indexer's
// top-k, the router's top-k) sits on a near-tie that bf16 rounding would flip. Fp8: matrices the checkpoint stores
// as e4m3 with 128×128 block scales stay so on the device (half the bytes of bf16); prefill-sized products quantize
// their activations per row and 128 columns to e4m3 (DeepSeek's recipe), decode-sized ones dequantize the weights
// in registers against bf16 activations; every other matrix is bf16. The CPU backend is always fp32.
enum class Precision { Bf16, Fp32, Fp8 };
// Switches of the CUDA backend, set by flags (--cuda-graphs, --cuda-op-times), never by the environment.
struct CudaSwitches {
  bool graphs = true;     // decode steps recorded once and replayed as CUDA graphs (step_graphs.h)
  bool op_times = false;  // CUDA events around every backend op, a table at exit (op_clock.h); slows every step
};
Precision parse_precision(const std::string& name);  // "bf16", "fp32" or "fp8"
const char* precision_name(Precision p);
// "cpu" or "cuda"; anything else is an error naming the value. "cuda" in a build without CUDA is an error too.
Device parse_device(const std::string& name);
const char* device_name(Device d);
bool cuda_available();  // this build has the CUDA backend
std::string cuda_device_name();  // the GPU the CUDA backend uses ("" without one)

// One backend's forward pass (forward.h instantiated for it) and the storage of its sequence state.
class ForwardRunner {
 public:
  virtual ~ForwardRunner() = default;
  // forward.h's Forward::run on this backend: the step, then its sampling stage.
  virtual StepLogits run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                              const LayerObserver& observe) = 0;
  // `floats` zeroed floats on the backend's device: a sequence's fixed block (state_layout.h) or a BlockPool's
  // storage.
  virtual std::shared_ptr<float> allocate_state(int64_t floats) = 0;
  // dst[0, n) = src[0, n) for memory of this backend's device (token blocks, fixed blocks).
  virtual void copy_floats(float* dst, const float* src, int64_t n) = 0;
  // Between host memory and this backend's device memory (state snapshots, state_snapshot.h).
  virtual void to_host(float* host_dst, const float* device_src, int64_t n) = 0;
  virtual void from_host(float* device_dst, const float* host_src, int64_t n) = 0;
  // Per layer, how many distinct routed experts the last forward ran (what a step must read of the expert
  // weights: the floor of benchmarks).
  virtual std::vector<int64_t> routed_experts_last_forward() const = 0;
  // Steps run from a recording (CUDA graphs of decode steps) so far; 0 for a backend that does not record.
  virtual int64_t steps_replayed() const { return 0; }
};

class Model {
 public:
  // `max_rollback`: how many of its latest tokens a sequence's state can drop again (rollback; state_layout.h).
  Model(ModelConfig config, ModelWeights weights, Device device = Device::Cpu, Precision precision = Precision::Bf16,
        CudaSwitches cuda = {}, int64_t max_rollback = 1);
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelConfig& config() const { return parts_->cfg; }
  Device device() const { return device_; }
  Precision precision() const { return precision_; }
  const StateLayout& state_layout() const { return parts_->layout; }
  // A fresh state. Its token blocks come from `pool` (a StatePool's bounded one, made by make_block_pool) or, when
  // null, from a pool the state owns: growable on the CPU, sized for `max_tokens` (required) on a GPU.
  SequenceState new_sequence(BlockPool* pool = nullptr, int64_t max_tokens = 0) const;
  // A bounded pool of token blocks where this model's backend computes.
  std::unique_ptr<BlockPool> make_block_pool(int64_t max_blocks) const;
  // Floats of a sequence's fixed block: sliding-window and compressor rings (entries are in token blocks).
  int64_t fixed_state_floats() const { return parts_->layout.fixed_floats; }
  // Token blocks a sequence of `tokens` tokens holds in total (from empty).
  int64_t blocks_for_tokens(int64_t tokens) const { return parts_->layout.blocks_for_tokens(tokens); }

  // Makes `to` (a state of this model) continue exactly where `from` is, with blocks of its own: a benchmark's many
  // sequences at one context length, each reading its own memory. False (and `to` left reset) when `to`'s pool
  // lacks the blocks.
  bool copy_state(const SequenceState& from, SequenceState& to) const;
  // The same, sharing: `to` takes a reference to each of `from`'s full blocks (they never change again) and a copy
  // of the partial last one. n completions of one prompt. Both states must use one pool.
  bool fork_state(const SequenceState& from, SequenceState& to) const;
  // Keeps the first `num_tokens` tokens of `state` and drops the rest (at most max_rollback of them): a speculative
  // step that keeps k of its n tokens. No copy of the state: its rings are indexed by position (state_layout.h).
  void rollback(SequenceState& state, int64_t num_tokens) const;

  // What decides this model's numbers, hashed (fingerprint.h); computed on first use: it reads every weight byte.
  ModelFingerprint fingerprint() const;
  // A state as bytes and back (state_snapshot.h: the format, and a streaming writer and reader). restore fills
  // `into`, a state of this model or of another Model with the same fingerprint, from any pool; on any error it
  // throws naming the cause and leaves `into` reset.
  std::string snapshot(const SequenceState& state) const;
  void restore(std::string_view bytes, SequenceState& into) const;

  // Runs `tokens` at positions state.num_tokens, state.num_tokens + 1, … and advances the state.
  // Returns logits [tokens.size(), vocab] when all_logits, else only the last token's [1, vocab].
  // `observe`, if given, sees the residual streams [tokens, hc·hidden] after every layer (for debugging parity).
  Mat forward(const std::vector<int32_t>& tokens, SequenceState& state, bool all_logits = true,
              const LayerObserver& observe = {}) const;

  // One step over several sequences: the projections and experts run once over all rows (weights are read once),
  // attention and compression per sequence. Every row's arithmetic is the same as in a solo forward, so results
  // are bit-identical however sequences are batched. The logits stay where they were computed; `stage` says what
  // happens to each logits row there (model/logits_stage.h: raw rows home, penalties, picks) and what comes home.
  StepLogits run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                      const LayerObserver& observe = {}) const;
  // run_step with every logits row home: one logits Mat per chunk (tests, benchmarks, dumps).
  std::vector<Mat> forward_batch(std::vector<SequenceChunk>& chunks, const LayerObserver& observe = {}) const;
  // Per layer, the distinct routed experts the last forward ran (0 for none yet).
  std::vector<int64_t> routed_experts_last_forward() const { return runner_->routed_experts_last_forward(); }
  int64_t steps_replayed() const { return runner_->steps_replayed(); }

  // What the forward runners share; heap-allocated so a moved Model keeps its address.
  struct Parts {
    ModelConfig cfg;
    ModelWeights w;
    RopeTable rope_main, rope_compress;
    StateLayout layout;
  };

 private:
  std::unique_ptr<Parts> parts_;
  Device device_ = Device::Cpu;
  Precision precision_ = Precision::Bf16;
  std::unique_ptr<ForwardRunner> runner_;
  std::unique_ptr<LazyFingerprint> fingerprint_ = std::make_unique<LazyFingerprint>();
  friend class SnapshotWriter;  // they move state through runner_
  friend class SnapshotReader;
};

// Reads config.json and the safetensors of a checkpoint directory and checks every tensor; `device` picks the
// backend (cuda uploads the weights to the GPU) and `precision` its matrix arithmetic.
Model load_model(const std::string& dir, Device device = Device::Cpu, Precision precision = Precision::Bf16,
                 CudaSwitches cuda = {}, int64_t max_rollback = 1);

// The CUDA runner (backend/cuda), defined only in builds with CUDA.
std::unique_ptr<ForwardRunner> make_cuda_runner(const Model::Parts& parts, Precision precision, CudaSwitches cuda);

}  // namespace strata::model::v4
