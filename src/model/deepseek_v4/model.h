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
  // Backend-side fixed state (sliding windows, compressor buffers) of a fresh sequence.
  virtual void init_state(SequenceState& state) = 0;
  // Storage for `floats` floats of compressed entries on the backend's device (EntryPageArena pages).
  virtual std::shared_ptr<float> allocate_entry_storage(int64_t floats) = 0;
  // dst[0, n) = src[0, n) for memory of this backend's device (entry pages, device state).
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
  Model(ModelConfig config, ModelWeights weights, Device device = Device::Cpu, Precision precision = Precision::Bf16,
        CudaSwitches cuda = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelConfig& config() const { return parts_->cfg; }
  Device device() const { return device_; }
  Precision precision() const { return precision_; }
  // A fresh state. Compressed entries go to `arena` (a StatePool's bounded one, made by make_arena) or, when null,
  // to an arena the state owns: growable on the CPU, sized for `max_tokens` (required) on a GPU.
  SequenceState new_sequence(EntryPageArena* arena = nullptr, int64_t max_tokens = 0) const;
  // A bounded arena whose pages live where this model's backend computes.
  std::unique_ptr<EntryPageArena> make_arena(int64_t page_floats, int64_t max_pages) const;
  // Floats of a sequence's fixed state: sliding windows and compressor buffers (entries are in pages).
  int64_t fixed_state_floats() const;
  // Compressed-entry pages a sequence of `tokens` tokens holds in total (from empty).
  int64_t pages_for_tokens(int64_t tokens, int64_t page_floats = EntryPageArena::kDefaultPageFloats) const;

  // Makes `to` (a state of this model) continue exactly where `from` is: the fork of a sequence, e.g. several
  // completions of one prompt, or a benchmark's many sequences at one context length. Entries are copied into
  // pages of `to`'s own arena; false (and `to` left reset) when that arena lacks the pages.
  bool copy_state(const SequenceState& from, SequenceState& to) const;

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
                 CudaSwitches cuda = {});

// The CUDA runner (backend/cuda), defined only in builds with CUDA.
std::unique_ptr<ForwardRunner> make_cuda_runner(const Model::Parts& parts, Precision precision, CudaSwitches cuda);

}  // namespace strata::model::v4
