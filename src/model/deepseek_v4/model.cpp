#include "model/deepseek_v4/model.h"

#include <algorithm>
#include <mutex>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace strata::model::v4 {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") {
    if (!cuda_available()) fail("--device cuda: this strata was built without the CUDA backend (configure with -DSTRATA_CUDA=on)");
    return Device::Cuda;
  }
  fail("unknown device '", name, "' (expected cpu or cuda)");
}

const char* device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

Precision parse_precision(const std::string& name) {
  if (name == "bf16") return Precision::Bf16;
  if (name == "fp32") return Precision::Fp32;
  if (name == "fp8") return Precision::Fp8;
  fail("unknown precision '", name, "' (expected bf16, fp32 or fp8)");
}

const char* precision_name(Precision p) {
  return p == Precision::Fp32 ? "fp32" : p == Precision::Fp8 ? "fp8" : "bf16";
}

bool cuda_available() {
#ifdef STRATA_WITH_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef STRATA_WITH_CUDA
std::unique_ptr<ForwardRunner> make_cuda_runner(const Model::Parts&, Precision, CudaSwitches) {
  fail("this strata was built without the CUDA backend");
}
std::string cuda_device_name() { return ""; }
#endif

StepRows make_step_rows(const ModelConfig& cfg, const std::vector<SequenceChunk>& chunks) {
  StepRows rows;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const SequenceChunk& ch = chunks[c];
    if (ch.tokens.empty()) fail("forward: sequence ", c, " of the batch has no tokens");
    if (!ch.state || ch.state->layers.size() != static_cast<size_t>(cfg.num_hidden_layers))
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
  }
}

LogitsStage all_rows_home(int64_t logits_rows) {
  LogitsStage stage;
  for (int64_t r = 0; r < logits_rows; ++r) stage.rows.push_back({r, true, {}, std::nullopt});
  return stage;
}

namespace {

// The CPU reference: forward.h over CpuBackend, state in host memory.
class CpuRunner : public ForwardRunner {
 public:
  explicit CpuRunner(const Model::Parts& p) : p_(p) {}
  StepLogits run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                      const LayerObserver& observe) override {
    cpu::CpuBackend backend;  // per call: its caches are per step, and calls may come from several threads
    StepLogits out =
        Forward<cpu::CpuBackend>(p_.cfg, p_.w, p_.rope_main, p_.rope_compress, backend).run(chunks, stage, observe);
    const std::lock_guard<std::mutex> lock(routed_mutex_);
    routed_ = backend.routed_experts();
    return out;
  }
  std::vector<int64_t> routed_experts_last_forward() const override {
    const std::lock_guard<std::mutex> lock(routed_mutex_);
    return routed_;
  }
  void init_state(SequenceState& s) override {
    for (LayerState& ls : s.layers) {
      ls.swa.assign(static_cast<size_t>(p_.cfg.sliding_window * p_.cfg.head_dim), 0.0f);
      for (CompressorState* c : {&ls.compressor, &ls.indexer}) {
        if (!c->rate) continue;
        c->pending_kv.assign(static_cast<size_t>(c->rate * c->width), 0.0f);
        c->pending_gate.assign(static_cast<size_t>(c->rate * c->width), 0.0f);
        if (c->width != c->dim) {  // CSA overlap
          c->overlap_kv.assign(static_cast<size_t>(c->rate * c->dim), 0.0f);
          c->overlap_gate.assign(static_cast<size_t>(c->rate * c->dim), 0.0f);
        }
      }
    }
  }
  std::shared_ptr<float> allocate_entry_storage(int64_t floats) override {
    return std::shared_ptr<float>(new float[static_cast<size_t>(floats)](), std::default_delete<float[]>());
  }
  void copy_floats(float* dst, const float* src, int64_t n) override { std::copy(src, src + n, dst); }
  void to_host(float* dst, const float* src, int64_t n) override { std::copy(src, src + n, dst); }
  void from_host(float* dst, const float* src, int64_t n) override { std::copy(src, src + n, dst); }

 private:
  const Model::Parts& p_;
  mutable std::mutex routed_mutex_;
  std::vector<int64_t> routed_;
};

CompressorState make_compressor_state(const CompressorWeights& w, EntryPageArena* arena) {
  CompressorState s;
  s.arena = arena;
  s.rate = w.rate;
  s.dim = w.dim;
  s.width = w.overlap ? 2 * w.dim : w.dim;
  return s;
}

}  // namespace

Model::Model(ModelConfig config, ModelWeights weights, Device device, Precision precision, CudaSwitches cuda)
    : parts_(std::make_unique<Parts>()), device_(device), precision_(precision) {
  parts_->rope_main = make_rope_table(config.rope_main, config.head_dim);
  parts_->rope_compress = make_rope_table(config.rope_compress, config.head_dim);
  parts_->cfg = std::move(config);
  parts_->w = std::move(weights);
  if (device == Device::Cpu) dequantize_head(parts_->w);
  runner_ = device == Device::Cuda ? make_cuda_runner(*parts_, precision, cuda) : std::make_unique<CpuRunner>(*parts_);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

SequenceState Model::new_sequence(EntryPageArena* arena, int64_t max_tokens) const {
  const ModelConfig& cfg = parts_->cfg;
  SequenceState s;
  if (!arena) {
    if (device_ == Device::Cpu) {
      s.own_arena = std::make_unique<EntryPageArena>();
    } else {
      if (max_tokens < 1) fail("new_sequence: a GPU sequence without a pool needs its maximum length");
      s.own_arena = make_arena(EntryPageArena::kDefaultPageFloats, pages_for_tokens(max_tokens));
    }
    arena = s.own_arena.get();
  }
  const int64_t largest = std::max(cfg.head_dim, cfg.index_head_dim);
  if (arena->page_floats() < largest)
    fail("state pages of ", arena->page_floats(), " floats cannot hold one ", largest, "-wide compressed entry");
  s.layers.resize(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    LayerState& ls = s.layers[static_cast<size_t>(l)];
    const AttentionWeights& a = parts_->w.layers[static_cast<size_t>(l)].attn;
    if (a.compressor) ls.compressor = make_compressor_state(*a.compressor, arena);
    if (a.indexer) ls.indexer = make_compressor_state(a.indexer->compressor, arena);
  }
  runner_->init_state(s);
  return s;
}

std::unique_ptr<EntryPageArena> Model::make_arena(int64_t page_floats, int64_t max_pages) const {
  if (device_ == Device::Cpu) return std::make_unique<EntryPageArena>(page_floats, max_pages);
  return std::make_unique<EntryPageArena>(page_floats, max_pages,
                                          runner_->allocate_entry_storage(std::max<int64_t>(1, max_pages) * page_floats));
}

int64_t Model::fixed_state_floats() const {
  const ModelConfig& cfg = parts_->cfg;
  int64_t floats = 0;
  for (const LayerWeights& l : parts_->w.layers) {
    floats += cfg.sliding_window * cfg.head_dim;
    for (const CompressorWeights* c : {l.attn.compressor ? &*l.attn.compressor : nullptr,
                                       l.attn.indexer ? &l.attn.indexer->compressor : nullptr})
      if (c) floats += 2 * c->rate * (c->overlap ? 2 * c->dim : c->dim) + (c->overlap ? 2 * c->rate * c->dim : 0);
  }
  return floats;
}

int64_t Model::pages_for_tokens(int64_t tokens, int64_t page_floats) const {
  int64_t pages = 0;
  for (const LayerWeights& l : parts_->w.layers)
    for (const CompressorWeights* c : {l.attn.compressor ? &*l.attn.compressor : nullptr,
                                       l.attn.indexer ? &l.attn.indexer->compressor : nullptr})
      if (c) {
        const int64_t entries = tokens / c->rate, per_page = page_floats / c->dim;
        pages += (entries + per_page - 1) / per_page;
      }
  return pages;
}

bool Model::copy_state(const SequenceState& from, SequenceState& to) const {
  if (from.layers.size() != to.layers.size() || &from == &to) fail("copy_state: states of different models");
  to.reset();
  for (size_t l = 0; l < from.layers.size(); ++l) {
    const LayerState& a = from.layers[l];
    LayerState& b = to.layers[l];
    b.swa = a.swa;  // host buffers (empty on a GPU, whose buffers are in the device block below)
    for (auto [src, dst] : {std::pair{&a.compressor, &b.compressor}, std::pair{&a.indexer, &b.indexer}}) {
      if (!src->rate) continue;
      if (!dst->ensure_room(src->n_entries)) {
        to.reset();
        return false;
      }
      const int64_t per_page = src->entries_per_page();
      for (size_t p = 0; p * per_page < static_cast<size_t>(src->n_entries); ++p) {
        const int64_t entries = std::min<int64_t>(per_page, src->n_entries - static_cast<int64_t>(p) * per_page);
        runner_->copy_floats(dst->arena->page(dst->pages[p]), src->arena->page(src->pages[p]), entries * src->dim);
      }
      dst->pending_kv = src->pending_kv;
      dst->pending_gate = src->pending_gate;
      dst->overlap_kv = src->overlap_kv;
      dst->overlap_gate = src->overlap_gate;
      dst->n_entries = src->n_entries;
      dst->n_pending = src->n_pending;
      dst->has_overlap = src->has_overlap;
    }
  }
  if (from.device_state && to.device_state)
    runner_->copy_floats(static_cast<float*>(to.device_state.get()), static_cast<const float*>(from.device_state.get()),
                         fixed_state_floats());
  to.num_tokens = from.num_tokens;
  return true;
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

Model load_model(const std::string& dir, Device device, Precision precision, CudaSwitches cuda) {
  ModelConfig cfg = load_config(dir);
  auto store = std::make_shared<TensorStore>(TensorStore::open(dir));
  ModelWeights weights = load_weights(cfg, store);
  return Model(std::move(cfg), std::move(weights), device, precision, cuda);
}

}  // namespace strata::model::v4
