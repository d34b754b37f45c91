#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/layout.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/deepseek_v4/draft_vocabulary.h"
#include "model/host_shared_region.h"

namespace strata::model::v4 {

#ifndef STRATA_WITH_CUDA
std::unique_ptr<ForwardRunner> make_cuda_runner(const Model::Parts&, Precision, CudaSwitches) {
  fail("this strata was built without the CUDA backend");
}
#endif

StepRows make_step_rows(const ModelConfig& cfg, const std::vector<SequenceChunk>& chunks, int64_t layers) {
  if (layers < 0) layers = cfg.num_hidden_layers;
  StepRows rows;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const SequenceChunk& ch = chunks[c];
    if (ch.tokens.empty()) fail("forward: sequence ", c, " of the batch has no tokens");
    if (!ch.state || !ch.state->layout || ch.state->layout->layers.size() != static_cast<size_t>(layers))
      fail("forward: sequence ", c, " of the batch has no state for this model");
    for (size_t other = 0; other < c; ++other)
      if (chunks[other].state == ch.state) fail("forward: sequence state ", c, " appears twice in one batch");
    for (int32_t t : ch.tokens)
      if (t < 0 || t >= cfg.vocab_size) fail("forward: token id ", t, " is outside the vocabulary [0, ", cfg.vocab_size, ")");
    rows.first.push_back(rows.rows());
    rows.pos0.push_back(ch.state->num_tokens);
    rows.count.push_back(static_cast<int64_t>(ch.tokens.size()));
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      rows.position.push_back(ch.state->num_tokens + static_cast<int64_t>(i));
      rows.sequence.push_back(static_cast<int64_t>(c));
    }
    for (int64_t i = ch.all_logits ? 0 : rows.count.back() - 1; i < rows.count.back(); ++i)
      rows.logits_rows.push_back(rows.first.back() + i);
    rows.tokens.insert(rows.tokens.end(), ch.tokens.begin(), ch.tokens.end());
  }
  return rows;
}

void check_stage(const LogitsStage& stage, int64_t logits_rows, int64_t vocab) {
  int64_t previous = -1;
  for (const LogitsRowRequest& r : stage.rows) {
    if (r.row <= previous || r.row >= logits_rows)
      fail("sampling stage: logits row ", r.row, " is out of order or outside the step's ", logits_rows, " rows");
    previous = r.row;
    if (r.pick) {
      const TokenPick& p = *r.pick;
      if (!(p.temperature >= 0) || (!p.greedy() && !(p.uniform >= 0 && p.uniform < 1)))
        fail("sampling stage: row ", r.row, " asks for a pick at temperature ", p.temperature, " with draw ", p.uniform,
             " (expected a temperature ≥ 0 and, when > 0, a draw in [0, 1))");
    }
    auto in_vocab = [&](int32_t id) {
      if (id < 0 || id >= vocab) fail("sampling stage: row ", r.row, " penalises token id ", id, " outside the vocabulary");
    };
    for (int32_t id : r.penalties.seen) in_vocab(id);
    for (const auto& s : r.penalties.subtract) in_vocab(s.first);
    if (r.allowed_late && (r.allowed || !stage.late_masks))
      fail("sampling stage: row ", r.row, " waits for a late mask but ",
           r.allowed ? "has a mask already" : "the stage has no late masks");
  }
}

LogitsStage all_rows_home(int64_t logits_rows) {
  LogitsStage stage;
  for (int64_t r = 0; r < logits_rows; ++r) stage.rows.push_back({r, true, {}, std::nullopt, nullptr});
  return stage;
}

namespace {

// The CPU reference: forward.h over CpuBackend, state in host memory.
class CpuRunner : public ForwardRunner {
 public:
  CpuRunner(const Model::Parts& p, cpu::Numerics numerics) : p_(p), numerics_(numerics) {}
  StepLogits run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                      const LayerObserver& observe) override {
    cpu::CpuBackend backend(numerics_);  // per call: its caches are per step, and calls may come from several threads
    StepLogits out =
        Forward<cpu::CpuBackend>(p_.cfg, p_.w, p_.rope_main, p_.rope_compress, backend).run(chunks, stage, observe);
    const std::lock_guard<std::mutex> lock(routed_mutex_);
    routed_ = backend.routed_experts();
    return out;
  }
  DraftOutput run_draft(std::vector<DraftChunk>& chunks, const LogitsStage& stage, int64_t mtp_layer) override {
    cpu::CpuBackend backend(numerics_);
    return Forward<cpu::CpuBackend>(p_.cfg, p_.w, p_.rope_main, p_.rope_compress, backend)
        .draft(chunks, mtp_layer, p_.mtp_views.at(static_cast<size_t>(mtp_layer)), stage);
  }
  std::vector<int64_t> routed_experts_last_forward() const override {
    const std::lock_guard<std::mutex> lock(routed_mutex_);
    return routed_;
  }
  std::shared_ptr<float> allocate_state(int64_t floats) override {
    return std::shared_ptr<float>(new float[static_cast<size_t>(std::max<int64_t>(1, floats))](),
                                  std::default_delete<float[]>());
  }
  void copy_floats(float* dst, const float* src, int64_t n) override { std::copy(src, src + n, dst); }
  void to_host(float* dst, const float* src, int64_t n) override { std::copy(src, src + n, dst); }
  void from_host(float* dst, const float* src, int64_t n) override { std::copy(src, src + n, dst); }
  std::unique_ptr<model::SharedRegion> make_shared_region(int64_t floats) override {
    return model::make_host_shared_region(floats);
  }
  std::unique_ptr<model::SharedRegion> open_shared_region(const std::string& handle) override {
    return model::open_host_shared_region(handle);
  }

 private:
  const Model::Parts& p_;
  const cpu::Numerics numerics_;
  mutable std::mutex routed_mutex_;
  std::vector<int64_t> routed_;
};

}  // namespace

Model::Model(ModelConfig config, ModelWeights weights, Device device, Precision precision, CudaSwitches cuda,
             int64_t max_rollback)
    : parts_(std::make_unique<Parts>()), device_(device), precision_(precision) {
  parts_->rope_main = make_rope_table(config.rope_main, config.head_dim);
  parts_->rope_compress = make_rope_table(config.rope_compress, config.head_dim);
  parts_->cfg = std::move(config);
  parts_->w = std::move(weights);
  parts_->layout = make_state_layout(parts_->cfg, parts_->w, max_rollback);
  for (size_t i = 0; i < parts_->w.mtp.size(); ++i)
    parts_->mtp_views.push_back(mtp_view_layout(parts_->layout, static_cast<int64_t>(i)));
  if (device == Device::Cuda && precision == Precision::Official)
    fail("--precision official (DeepSeek's own numerics) runs on the CPU backend only so far; on --device cuda use "
         "bf16, fp32 or fp8 (docs/official_numerics.md says what is left)");
  if (device == Device::Cpu) dequantize_head(parts_->w);
  const cpu::Numerics numerics = precision == Precision::Official ? cpu::Numerics::Official : cpu::Numerics::Reference;
  runner_ = device == Device::Cuda ? make_cuda_runner(*parts_, precision, cuda)
                                   : std::make_unique<CpuRunner>(*parts_, numerics);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

SequenceState Model::new_sequence(BlockPool* pool, int64_t max_tokens) const {
  SequenceState s;
  s.layout = &parts_->layout;
  if (!pool) {
    if (device_ == Device::Cpu) {
      s.own_pool = std::make_unique<BlockPool>(parts_->layout.block_floats);
    } else {
      if (max_tokens < 1) fail("new_sequence: a GPU sequence without a pool needs its maximum length");
      s.own_pool = make_block_pool(blocks_for_tokens(max_tokens));
    }
    pool = s.own_pool.get();
  }
  if (pool->block_floats() != parts_->layout.block_floats)
    fail("new_sequence: a block pool of ", pool->block_floats(), "-float blocks, this model's blocks have ",
         parts_->layout.block_floats);
  s.pool = pool;
  s.fixed = runner_->allocate_state(parts_->layout.fixed_floats);
  s.mtp_tokens.assign(parts_->layout.mtp_layers.size(), 0);
  return s;
}

std::unique_ptr<BlockPool> Model::make_block_pool(int64_t max_blocks) const {
  const int64_t floats = parts_->layout.block_floats;
  if (device_ == Device::Cpu) return std::make_unique<BlockPool>(floats, max_blocks);
  return std::make_unique<BlockPool>(floats, max_blocks, runner_->allocate_state(std::max<int64_t>(1, max_blocks) * floats));
}

namespace {

void check_same_model(const SequenceState& from, const SequenceState& to, const StateLayout& layout, const char* op) {
  if (from.layout != &layout || to.layout != &layout) fail(op, ": states of another model");
  if (&from == &to) fail(op, ": a state onto itself");
  // Its blocks reach past num_tokens and its rings lack rows until the replay ends (sequence_state.h).
  if (from.replaying())
    fail(op, ": the source is rebuilding its window by bounded replay up to position ", from.entries_kept_until,
         " (now at ", from.num_tokens, ")");
}

}  // namespace

bool Model::copy_state(const SequenceState& from, SequenceState& to) const {
  check_same_model(from, to, parts_->layout, "copy_state");
  to.reset();
  if (!to.ensure_blocks(from.num_tokens)) return false;
  const int64_t block_floats = parts_->layout.block_floats;
  std::vector<ForwardRunner::DeviceCopy> copies;
  for (size_t b = 0; b < to.blocks.size(); ++b)  // `from` may hold blocks reserved for its next step too
    copies.push_back({to.pool->block(to.blocks[b]), from.pool->block(from.blocks[b]), block_floats});
  copies.push_back({to.fixed.get(), from.fixed.get(), parts_->layout.fixed_floats});
  runner_->copy_floats_many(copies);
  to.num_tokens = from.num_tokens;
  to.mtp_tokens = from.mtp_tokens;  // the MTP rings came with the fixed block
  return true;
}

bool Model::fork_state(const SequenceState& from, SequenceState& to) const {
  check_same_model(from, to, parts_->layout, "fork_state");
  if (from.pool != to.pool) fail("fork_state: the states use different block pools (copy_state copies across pools)");
  to.reset();
  // Blocks past those of the kept tokens may be reserved for `from`'s next step: they are not forked.
  const int64_t full = std::min<int64_t>(from.num_tokens / parts_->layout.block_tokens,
                                         static_cast<int64_t>(from.blocks.size()));
  const bool partial = from.num_tokens % parts_->layout.block_tokens != 0 &&
                       static_cast<int64_t>(from.blocks.size()) > full;
  if (partial && to.pool->max_blocks() && to.pool->free_blocks() < 1) return false;
  for (int64_t b = 0; b < full; ++b) {
    to.pool->retain(from.blocks[static_cast<size_t>(b)]);
    to.blocks.push_back(from.blocks[static_cast<size_t>(b)]);
  }
  if (partial) {  // the block both will go on writing: a copy each
    const int32_t mine = *to.pool->allocate();
    runner_->copy_floats(to.pool->block(mine), from.pool->block(from.blocks[static_cast<size_t>(full)]),
                         parts_->layout.block_floats);
    to.blocks.push_back(mine);
  }
  runner_->copy_floats(to.fixed.get(), from.fixed.get(), parts_->layout.fixed_floats);
  to.num_tokens = from.num_tokens;
  to.mtp_tokens = from.mtp_tokens;  // the MTP rings came with the fixed block
  return true;
}

void Model::rollback(SequenceState& state, int64_t num_tokens) const {
  if (state.layout != &parts_->layout) fail("rollback: a state of another model");
  state.rollback(num_tokens, [&](float* dst, const float* src, int64_t n) { runner_->copy_floats(dst, src, n); });
}

Mat Model::forward(const std::vector<int32_t>& tokens, SequenceState& state, bool all_logits,
                   const LayerObserver& observe) const {
  std::vector<SequenceChunk> chunks = {{tokens, &state, all_logits}};
  return std::move(forward_batch(chunks, observe)[0]);
}

StepLogits Model::run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                           const LayerObserver& observe) const {
  return runner_->run_step(chunks, stage, observe);
}

DraftOutput Model::run_draft(std::vector<DraftChunk>& chunks, const LogitsStage& stage, int64_t mtp_layer) const {
  if (mtp_layer < 0 || mtp_layer >= mtp_layers())
    fail("MTP draft: no MTP layer ", mtp_layer, " (the checkpoint has ", mtp_layers(), ")");
  for (size_t c = 0; c < chunks.size(); ++c)
    if (!chunks[c].state || chunks[c].state->layout != &parts_->layout)
      fail("MTP draft: sequence ", c, " of the batch has no state of this model");
  return runner_->run_draft(chunks, stage, mtp_layer);
}

std::vector<Mat> Model::forward_batch(std::vector<SequenceChunk>& chunks, const LayerObserver& observe) const {
  int64_t rows = 0;
  for (const SequenceChunk& ch : chunks) rows += ch.all_logits ? static_cast<int64_t>(ch.tokens.size()) : 1;
  const StepLogits home = run_step(chunks, all_rows_home(rows), observe);
  std::vector<Mat> out;
  int64_t at = 0;
  for (const SequenceChunk& ch : chunks) {
    const int64_t count = ch.all_logits ? static_cast<int64_t>(ch.tokens.size()) : 1;
    Mat m(count, config().vocab_size);
    std::copy(home.raw.row(at), home.raw.row(at) + count * m.cols, m.v.begin());
    at += count;
    out.push_back(std::move(m));
  }
  return out;
}

Model load_model(const std::string& dir, Device device, Precision precision, CudaSwitches cuda, int64_t max_rollback,
                 bool draft_vocabulary) {
  ModelConfig cfg = load_config(dir);
  auto store = std::make_shared<TensorStore>(TensorStore::open(dir));
  ModelWeights weights = load_weights(cfg, store);
  // The checkpoint's reduced draft vocabulary, when it has MTP layers and carries one (draft_vocabulary.h).
  const std::string draft_vocab = dir + "/" + kDraftVocabularyFile;
  if (draft_vocabulary && !weights.mtp.empty() && std::filesystem::exists(draft_vocab))
    set_draft_vocabulary(weights, read_draft_vocabulary(draft_vocab, cfg.vocab_size));
  return Model(std::move(cfg), std::move(weights), device, precision, cuda, max_rollback);
}

}  // namespace strata::model::v4
