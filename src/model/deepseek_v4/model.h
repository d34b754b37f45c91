#pragma once
// A loaded DeepSeek-V4 model on one backend (CPU reference or CUDA): the forward pass of forward.h, state creation.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/deepseek_v4/fingerprint.h"
#include "model/deepseek_v4/forward.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/weights.h"
#include "model/device.h"
#include "model/model.h"

namespace strata::model::v4 {

using model::CudaSwitches;
using model::Device;
using model::Precision;

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
  // dst[0, n) = src[0, n) for memory of this backend's device (token blocks, fixed blocks). Ordered with the steps;
  // done by the next synchronize() at the latest.
  virtual void copy_floats(float* dst, const float* src, int64_t n) = 0;
  // Several copy_floats at once (a snapshot layer's runs into or out of a shared region), which a backend may do in
  // one launch. The copies must not overlap one another.
  struct DeviceCopy {
    float* dst;
    const float* src;
    int64_t n;
  };
  virtual void copy_floats_many(const std::vector<DeviceCopy>& copies) {
    for (const DeviceCopy& c : copies) copy_floats(c.dst, c.src, c.n);
  }
  // Between host memory and this backend's device memory (state snapshots, state_snapshot.h).
  virtual void to_host(float* host_dst, const float* device_src, int64_t n) = 0;
  virtual void from_host(float* device_dst, const float* host_src, int64_t n) = 0;
  // Same-host state transfer (model/shared_region.h): memory of this backend's device that another process opens.
  virtual std::unique_ptr<model::SharedRegion> make_shared_region(int64_t floats) = 0;
  virtual std::unique_ptr<model::SharedRegion> open_shared_region(const std::string& handle) = 0;
  // Waits until this backend's copies of state are done (before another process reads what they wrote, or a
  // region they read from is given back).
  virtual void synchronize() {}
  // Several from_host copies of `n` floats each (a prefix's token blocks), which a backend may overlap.
  struct HostCopy {
    float* device_dst;
    const float* host_src;
  };
  virtual void from_host_many(const std::vector<HostCopy>& copies, int64_t n) {
    for (const HostCopy& c : copies) from_host(c.device_dst, c.host_src, n);
  }
  // forward.h's Forward::draft (an MTP draft step, docs/mtp.md) on this backend.
  virtual DraftOutput run_draft(std::vector<DraftChunk>& chunks, const LogitsStage& stage, int64_t mtp_layer) = 0;
  // Per layer, how many distinct routed experts the last forward ran (what a step must read of the expert
  // weights: the floor of benchmarks).
  virtual std::vector<int64_t> routed_experts_last_forward() const = 0;
  // Steps run from a recording (CUDA graphs of decode steps) so far; 0 for a backend that does not record.
  virtual int64_t steps_replayed() const { return 0; }
};

// DeepSeek-V4 (model_type deepseek_v4) as a model of the family (model/model.h); every method is described there.
class Model : public model::Model {
 public:
  // `max_rollback`: how many of its latest tokens a sequence's state can drop again (rollback; state_layout.h).
  Model(ModelConfig config, ModelWeights weights, Device device = Device::Cpu, Precision precision = Precision::Bf16,
        CudaSwitches cuda = {}, int64_t max_rollback = 1);
  ~Model() override;
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const ModelConfig& config() const override { return parts_->cfg; }
  Device device() const override { return device_; }
  Precision precision() const override { return precision_; }
  const StateLayout& state_layout() const override { return parts_->layout; }
  SequenceState new_sequence(BlockPool* pool = nullptr, int64_t max_tokens = 0) const override;
  std::unique_ptr<BlockPool> make_block_pool(int64_t max_blocks) const override;
  bool copy_state(const SequenceState& from, SequenceState& to) const override;
  bool fork_state(const SequenceState& from, SequenceState& to) const override;
  // No copy of the state: its rings are indexed by position (state_layout.h).
  void rollback(SequenceState& state, int64_t num_tokens) const override;

  // fingerprint.h: computed on first use (it reads every weight byte). snapshot/restore: state_snapshot.h's format,
  // a streaming writer and reader; restore throws naming the cause and leaves `into` reset on any error.
  ModelFingerprint fingerprint() const override;
  std::string snapshot(const SequenceState& state) const override;
  void restore(std::string_view bytes, SequenceState& into) const override;
  void snapshot_pieces(const SequenceState& state, const std::function<void(std::string)>& piece,
                       model::SharedRegion* floats_into) const override;
  int64_t snapshot_floats(const SequenceState& state) const override;
  std::unique_ptr<model::StateRestore> begin_restore(SequenceState& into,
                                                     const model::SharedRegion* floats_from) const override;
  std::unique_ptr<model::SharedRegion> make_shared_region(int64_t floats) const override {
    return runner_->make_shared_region(floats);
  }
  std::unique_ptr<model::SharedRegion> open_shared_region(const std::string& handle) const override {
    return runner_->open_shared_region(handle);
  }
  void synchronize() const override { runner_->synchronize(); }
  void read_block(const SequenceState& state, int64_t index, float* host) const override;
  std::string boundary_rows(const SequenceState& state) const override;
  void restore_prefix(const std::vector<PrefixBlock>& blocks, std::string_view boundary_rows,
                      SequenceState& into) const override;
  void restore_prefix_for_replay(const std::vector<PrefixBlock>& blocks, int64_t replay_from,
                                 SequenceState& into) const override;

  // Every row's arithmetic is the same as in a solo forward, so on the CPU results are bit-identical however
  // sequences are batched.
  StepLogits run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                      const LayerObserver& observe = {}) const override;
  std::vector<Mat> forward_batch(std::vector<SequenceChunk>& chunks, const LayerObserver& observe = {}) const override;
  Mat forward(const std::vector<int32_t>& tokens, SequenceState& state, bool all_logits = true,
              const LayerObserver& observe = {}) const override;
  int64_t mtp_layers() const override { return static_cast<int64_t>(parts_->w.mtp.size()); }
  const std::vector<int32_t>& draft_vocabulary() const override { return parts_->w.draft_vocab; }
  DraftOutput run_draft(std::vector<DraftChunk>& chunks, const LogitsStage& stage,
                        int64_t mtp_layer = 0) const override;
  std::vector<int64_t> routed_experts_last_forward() const override { return runner_->routed_experts_last_forward(); }
  int64_t steps_replayed() const override { return runner_->steps_replayed(); }

  // What the forward runners share; heap-allocated so a moved Model keeps its address.
  struct Parts {
    ModelConfig cfg;
    ModelWeights w;
    RopeTable rope_main, rope_compress;
    StateLayout layout;
    std::vector<StateLayout> mtp_views;  // per MTP layer, mtp_view_layout(layout, i)
  };

 private:
  // restore_prefix's first part: each block shared from into's pool or copied in from host memory.
  void take_prefix_blocks(const std::vector<PrefixBlock>& blocks, SequenceState& into) const;

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
                 CudaSwitches cuda = {}, int64_t max_rollback = 1, bool draft_vocabulary = true);

// The CUDA runner (backend/cuda), defined only in builds with CUDA.
std::unique_ptr<ForwardRunner> make_cuda_runner(const Model::Parts& parts, Precision precision, CudaSwitches cuda);

}  // namespace strata::model::v4
