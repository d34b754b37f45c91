#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/moe_gemm.h"
#include "backend/cuda/moe_mma.h"
#include "core/dtype.h"
#include "core/error.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

// --- Weights ----------------------------------------------------------------------------------------------------

DeviceWeights::DeviceWeights(const ModelWeights& w, GemmType type, const std::vector<const std::vector<float>*>& extra)
    : type_(type) {
  // The embedding is a row lookup and the head one product per step: both stay bf16 (dequantized if stored FP8).
  add(w.embed, false);
  add(w.head, false);
  for (const auto* v : {&w.norm, &w.hc_head_fn, &w.hc_head_base, &w.hc_head_scale}) add(*v);
  auto add_compressor = [&](const CompressorWeights& c) {
    add(c.wkv);
    add(c.wgate);
    add(c.ape);
    add(c.norm);
  };
  auto expert_fp8 = [&](const ExpertWeights& e) {
    return fp8_storable(e.w1) && fp8_storable(e.w2) && fp8_storable(e.w3);
  };
  auto add_expert = [&](const ExpertWeights& e, bool fp8) {
    add(e.w1, fp8);
    add(e.w2, fp8);
    add(e.w3, fp8);
  };
  for (const LayerWeights& l : w.layers) {
    for (const HyperConnectionWeights* h : {&l.hc_attn, &l.hc_ffn})
      for (const auto* v : {&h->fn, &h->base, &h->scale}) add(*v);
    add(l.attn_norm);
    add(l.ffn_norm);
    const AttentionWeights& a = l.attn;
    for (const WeightRef* m : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) add(*m);
    // The grouped o-projection multiplies row block g of wo_a (rank rows) by column block g of its input (wo_a.cols
    // wide; groups = the heads' width over it): FP8 only when both are whole 128-blocks, so each group's block
    // scales are a sub-grid of the matrix's. V4-Flash: 8 groups of 1024 rows × 4096 columns.
    const bool groups_whole = a.wo_a.cols > 0 && a.wq_b.rows % a.wo_a.cols == 0 &&
                              a.wo_a.rows % (a.wq_b.rows / a.wo_a.cols) == 0 &&
                              (a.wo_a.rows / (a.wq_b.rows / a.wo_a.cols)) % kFp8Block == 0 &&
                              a.wo_a.cols % kFp8Block == 0;
    add(a.wo_a, groups_whole);
    for (const auto* v : {&a.q_norm, &a.kv_norm, &a.attn_sink}) add(*v);
    if (a.compressor) add_compressor(*a.compressor);
    if (a.indexer) {
      add(a.indexer->wq_b);
      add(a.indexer->weights_proj);
      add_compressor(a.indexer->compressor);
    }
    add(l.ffn.gate);
    add(l.ffn.gate_bias);
    // The grouped kernels take one weight type per layer's table: the routed experts are FP8 only all together.
    const bool routed_fp8 = std::all_of(l.ffn.experts.begin(), l.ffn.experts.end(), expert_fp8);
    for (const ExpertWeights& e : l.ffn.experts) add_expert(e, routed_fp8);
    if (l.ffn.shared) add_expert(*l.ffn.shared, expert_fp8(*l.ffn.shared));
    if (!l.ffn.tid2eid.empty() && !ints_.count(l.ffn.tid2eid.data())) {
      int32_t* d = nullptr;
      const size_t bytes = l.ffn.tid2eid.size() * sizeof(int32_t);
      STRATA_CUDA_CHECK(cudaMalloc(&d, bytes));
      STRATA_CUDA_CHECK(cudaMemcpy(d, l.ffn.tid2eid.data(), bytes, cudaMemcpyHostToDevice));
      allocations_.push_back(d);
      ints_[l.ffn.tid2eid.data()] = d;
      bytes_ += static_cast<int64_t>(bytes);
    }
  }
  for (const std::vector<float>* v : extra) add(*v);
  for (const LayerWeights& l : w.layers) {
    const std::vector<ExpertWeights>& ex = l.ffn.experts;
    if (ex.empty() || expert_tables_.count(ex.data())) continue;
    ExpertTables t;
    t.type = matrix(ex[0].w1).type;
    const ExpertWeights* shared = l.ffn.shared ? &*l.ffn.shared : nullptr;
    t.with_shared = shared && shared->w1.rows == ex[0].w1.rows && shared->w1.cols == ex[0].w1.cols &&
                    matrix(shared->w1).type == t.type;
    auto upload_table = [&](const std::vector<const void*>& table) {
      void* d = nullptr;
      const size_t bytes = table.size() * sizeof(const void*);
      STRATA_CUDA_CHECK(cudaMalloc(&d, bytes));
      STRATA_CUDA_CHECK(cudaMemcpy(d, table.data(), bytes, cudaMemcpyHostToDevice));
      allocations_.push_back(d);
      return static_cast<const void* const*>(d);
    };
    for (auto [member, dst, scales] :
         {std::tuple{&ExpertWeights::w1, &t.w1, &t.s1}, std::tuple{&ExpertWeights::w3, &t.w3, &t.s3},
          std::tuple{&ExpertWeights::w2, &t.w2, &t.s2}}) {
      std::vector<const void*> table, scale_table;
      for (const ExpertWeights& e : ex) {
        table.push_back(matrix(e.*member).data);
        scale_table.push_back(matrix(e.*member).scales);
      }
      if (t.with_shared) {
        table.push_back(matrix(shared->*member).data);
        scale_table.push_back(matrix(shared->*member).scales);
      }
      *dst = upload_table(table);
      if (t.type == GemmType::Fp8) *scales = reinterpret_cast<const float* const*>(upload_table(scale_table));
    }
    expert_tables_[ex.data()] = t;
  }
}

const DeviceWeights::ExpertTables& DeviceWeights::experts(const MoeWeights& w) const {
  const auto it = expert_tables_.find(w.experts.data());
  if (it == expert_tables_.end()) fail("CUDA backend: a layer's expert tables were not uploaded");
  return it->second;
}

DeviceWeights::~DeviceWeights() {
  for (void* p : allocations_) cudaFree(p);
}

bool DeviceWeights::fp8_storable(const WeightRef& w) const {
  return type_ == GemmType::Fp8 && w.dtype == DType::F8_E4M3 && w.block_scales && w.block_rows == kFp8Block &&
         w.block_cols == kFp8Block && w.scale_row_offset % kFp8Block == 0;
}

void DeviceWeights::add(const WeightRef& w, bool fp8) {
  if (!w.data || matrices_.count(w.data)) return;  // absent, or tied (the head shares the embedding)
  if (fp8 && fp8_storable(w)) {
    // The stored codes and the scale blocks of these rows, as they are (a row slice starts on a block boundary).
    const int64_t scale_rows = (w.rows + kFp8Block - 1) / kFp8Block, scale_cols = (w.cols + kFp8Block - 1) / kFp8Block;
    const size_t code_bytes = static_cast<size_t>(w.rows * w.cols),
                 scale_bytes = static_cast<size_t>(scale_rows * scale_cols) * sizeof(float);
    void *d = nullptr, *ds = nullptr;
    STRATA_CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(code_bytes, 1)));
    STRATA_CUDA_CHECK(cudaMalloc(&ds, std::max<size_t>(scale_bytes, 1)));
    STRATA_CUDA_CHECK(cudaMemcpy(d, w.data, code_bytes, cudaMemcpyHostToDevice));
    STRATA_CUDA_CHECK(cudaMemcpy(ds, w.block_scales + (w.scale_row_offset / kFp8Block) * scale_cols, scale_bytes,
                                 cudaMemcpyHostToDevice));
    allocations_.push_back(d);
    allocations_.push_back(ds);
    bytes_ += static_cast<int64_t>(code_bytes + scale_bytes);
    matrices_[w.data] = {d, w.rows, w.cols, GemmType::Fp8, static_cast<const float*>(ds)};
    return;
  }
  const GemmType type = type_ == GemmType::Fp32 ? GemmType::Fp32 : GemmType::Bf16;
  const size_t count = static_cast<size_t>(w.rows * w.cols), bytes = count * gemm_type_size(type);
  std::vector<uint16_t> bf16(type == GemmType::Bf16 ? count : 0);
  std::vector<float> f32(type == GemmType::Fp32 ? count : 0);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(w.cols));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      w.row_f32(r, row.data());
      if (type == GemmType::Fp32)
        std::copy(row.begin(), row.end(), f32.begin() + r * w.cols);
      else
        for (int64_t c = 0; c < w.cols; ++c) bf16[static_cast<size_t>(r * w.cols + c)] = f32_to_bf16(row[c]);
    }
  }
  void* d = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
  const void* host = type == GemmType::Fp32 ? static_cast<const void*>(f32.data()) : bf16.data();
  STRATA_CUDA_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
  allocations_.push_back(d);
  bytes_ += static_cast<int64_t>(bytes);
  matrices_[w.data] = {d, w.rows, w.cols, type};
}

void DeviceWeights::add(const std::vector<float>& v) {
  if (v.empty() || vectors_.count(v.data())) return;
  void* d = nullptr;
  const size_t bytes = v.size() * sizeof(float);
  STRATA_CUDA_CHECK(cudaMalloc(&d, bytes));
  STRATA_CUDA_CHECK(cudaMemcpy(d, v.data(), bytes, cudaMemcpyHostToDevice));
  allocations_.push_back(d);
  bytes_ += static_cast<int64_t>(bytes);
  vectors_[v.data()] = static_cast<const float*>(d);
}

const DeviceMatrix& DeviceWeights::matrix(const WeightRef& w) const {
  const auto it = matrices_.find(w.data);
  if (it == matrices_.end() || it->second.rows != w.rows) fail("CUDA backend: a weight matrix was not uploaded");
  return it->second;
}

const float* DeviceWeights::vec(const std::vector<float>& v) const {
  if (v.empty()) return nullptr;
  const auto it = vectors_.find(v.data());
  if (it == vectors_.end()) fail("CUDA backend: a weight vector was not uploaded");
  return it->second;
}

const int32_t* DeviceWeights::ints(const std::vector<int32_t>& v) const {
  if (v.empty()) return nullptr;
  const auto it = ints_.find(v.data());
  if (it == ints_.end()) fail("CUDA backend: an integer table was not uploaded");
  return it->second;
}

// --- Backend ----------------------------------------------------------------------------------------------------

CudaBackend::CudaBackend(const DeviceWeights& weights, Gemm& gemm, Scratch& scratch,
                         const std::vector<LayerOffsets>& layout, const ModelConfig& cfg,
                         const std::vector<const RopeTable*>& ropes, cudaStream_t stream, OpClock* clock)
    : weights_(weights),
      gemm_(gemm),
      scratch_(scratch),
      layout_(layout),
      cfg_(cfg),
      ropes_(ropes),
      stream_(stream),
      clock_(clock) {}

// Steps of at most this many query rows (decode) split each query's keys over blocks: few queries would leave the
// GPU idle, and the split's scratch (rows · heads · parts · head_dim) stays small. Larger steps have blocks enough.
constexpr int64_t kSplitKeysMaxRows = 256;

// Times the enclosing op when STRATA_CUDA_OP_TIMES is set (op_clock.h).
#define STRATA_TIMED_OP(name) const OpClock::Scope timed_op_(clock_, name, rows_.rows, stream_)

template <typename T>
T* CudaBackend::upload(const std::vector<T>& host) {
  T* d = scratch_.alloc<T>(std::max<int64_t>(1, static_cast<int64_t>(host.size())));
  if (!host.empty())
    STRATA_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream_));
  return d;
}

static CompressorState& compressor_of(LayerState& ls, CompressorSlot slot) {
  return slot == CompressorSlot::Attention ? ls.compressor : ls.indexer;
}

namespace {

// A step's uploads gathered on the host, then sent as one copy from pinned memory: the GPU waits for one transfer
// at the start of a step instead of two dozen small pageable ones.
class UploadPack {
 public:
  template <typename T>
  size_t add(const std::vector<T>& v) {
    const size_t at = (bytes_.size() + 255) / 256 * 256;
    bytes_.resize(at + std::max<size_t>(1, v.size()) * sizeof(T));
    if (!v.empty()) std::memcpy(bytes_.data() + at, v.data(), v.size() * sizeof(T));
    return at;
  }
  // Copies everything to `device` (size() bytes) through pinned `staging`, or straight from pageable memory
  // without one (the driver has taken the bytes when the call returns).
  void send(char* device, HostStaging* staging, cudaStream_t stream) const {
    const void* from = bytes_.data();
    if (staging) {
      void* pinned = staging->bytes(bytes_.size());
      std::memcpy(pinned, bytes_.data(), bytes_.size());
      from = pinned;
    }
    STRATA_CUDA_CHECK(cudaMemcpyAsync(device, from, bytes_.size(), cudaMemcpyHostToDevice, stream));
  }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<char> bytes_;
};

// Bounds that size a step's kernels, rounded up so that a decode step's shape (and its recording, step_graphs.h)
// stays the same for many steps. Kernels read the true counts from the step's positions on the device.
int64_t entries_bound(int64_t entries) { return (entries + 255) / 256 * 256; }
int64_t pages_bound(int64_t pages) { return (std::max<int64_t>(pages, 1) + 7) / 8 * 8; }

}  // namespace

void CudaBackend::begin_step(const Step& step) {
  if (step.rows.chunks() == 0) fail("CUDA forward: an empty batch");
  const OpClock::Scope timed_op_(clock_, "begin_step (uploads)", step.rows.rows(), stream_);
  scratch_.reset();
  converted_.clear();
  rope_rows_.clear();
  work_.clear();
  closed_max_.clear();
  routed_experts_.clear();
  graph_ = nullptr;
  const StepRows& r = step.rows;
  const int64_t n = r.rows(), chunks = r.chunks();
  // The shape of a decode step (every chunk one token, only its logits): what its recording depends on.
  bool decode = true;
  for (int64_t c = 0; c < chunks; ++c) decode = decode && r.count[c] == 1 && !(*step.chunks)[static_cast<size_t>(c)].all_logits;
  std::vector<int64_t> shape{n};

  UploadPack pack;
  auto ints = [](const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); };
  const size_t at_position = pack.add(ints(r.position)), at_chunk = pack.add(ints(r.sequence)),
               at_first = pack.add(ints(r.first)), at_pos0 = pack.add(ints(r.pos0)), at_count = pack.add(ints(r.count)),
               at_tokens = pack.add(r.tokens);
  std::vector<float*> bases(static_cast<size_t>(chunks));
  for (int64_t c = 0; c < chunks; ++c) {
    const SequenceState& s = *(*step.chunks)[static_cast<size_t>(c)].state;
    if (!s.device_state) fail("CUDA forward: sequence ", c, " has no device state (made by another backend?)");
    bases[static_cast<size_t>(c)] = static_cast<float*>(s.device_state.get());
  }
  const size_t at_state = pack.add(bases);
  // The rows whose logits the step computes (Forward::run asks hyper_head for them).
  wanted_ = &r.logits_rows;
  const size_t at_wanted = pack.add(std::vector<int32_t>(r.logits_rows.begin(), r.logits_rows.end()));

  // Entry pages: every compressor gets the pages its new entries need now (a pool reserved them before the step),
  // and its page list goes to the device, padded to a bound. Windows that close this step, per rate, padded to the
  // most that can close (⌈count / rate⌉ per chunk) with (-1, 0) pairs.
  tables_.assign(static_cast<size_t>(cfg_.num_hidden_layers * 2), EntryTable{});
  std::vector<size_t> pages_at(tables_.size(), 0);
  std::map<int64_t, size_t> work_at;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
    for (CompressorSlot slot : {CompressorSlot::Attention, CompressorSlot::Indexer}) {
      const CompressorState& first = compressor_of(step.layer_state(0, l), slot);
      if (!first.rate) continue;
      int64_t max_pages = 1;
      for (int64_t c = 0; c < chunks; ++c) {
        CompressorState& st = compressor_of(step.layer_state(c, l), slot);
        if (st.arena != first.arena)
          fail("CUDA forward: the sequences of one batch must share one entry arena (a StatePool's)");
        const int64_t closed = (r.pos0[c] + r.count[c]) / st.rate;
        if (!st.ensure_room(closed))
          fail("compressed-entry pages exhausted: the scheduler must reserve pages before running a step");
        max_pages = std::max<int64_t>(max_pages, static_cast<int64_t>(st.pages.size()));
      }
      max_pages = pages_bound(max_pages);
      std::vector<int32_t> pages(static_cast<size_t>(chunks * max_pages), 0);
      for (int64_t c = 0; c < chunks; ++c) {
        const CompressorState& st = compressor_of(step.layer_state(c, l), slot);
        std::copy(st.pages.begin(), st.pages.end(), pages.begin() + c * max_pages);
      }
      const size_t t_index = static_cast<size_t>(l * 2 + (slot == CompressorSlot::Indexer));
      EntryTable& t = tables_[t_index];
      t.arena = first.arena->base();
      pages_at[t_index] = pack.add(pages);
      t.max_pages = max_pages;
      t.page_floats = first.arena->page_floats();
      t.per_page = first.entries_per_page();
      t.dim = first.dim;
      shape.insert(shape.end(), {reinterpret_cast<intptr_t>(t.arena), max_pages});
      if (!work_.count(first.rate)) {
        std::vector<int32_t> work;
        int64_t most = 0, bound = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t e0 = r.pos0[c] / first.rate, e1 = (r.pos0[c] + r.count[c]) / first.rate;
          for (int64_t w = e0; w < e1; ++w) work.insert(work.end(), {static_cast<int32_t>(c), static_cast<int32_t>(w)});
          most = std::max(most, e1);
          bound += (r.count[c] + first.rate - 1) / first.rate;
        }
        while (static_cast<int64_t>(work.size()) < 2 * bound) work.insert(work.end(), {-1, 0});
        work_at[first.rate] = pack.add(work);
        work_[first.rate] = {nullptr, bound};
        closed_max_[first.rate] = entries_bound(most);
        shape.insert(shape.end(), {first.rate, bound, closed_max_[first.rate]});
      }
    }

  // One copy of everything; then the pointers into it.
  char* device = static_cast<char*>(scratch_.bytes(pack.size()));
  pack.send(device, upload_staging_, stream_);
  auto at = [&](size_t offset) { return device + offset; };
  rows_.position = reinterpret_cast<const int32_t*>(at(at_position));
  rows_.chunk = reinterpret_cast<const int32_t*>(at(at_chunk));
  rows_.first = reinterpret_cast<const int32_t*>(at(at_first));
  rows_.pos0 = reinterpret_cast<const int32_t*>(at(at_pos0));
  rows_.count = reinterpret_cast<const int32_t*>(at(at_count));
  rows_.rows = n;
  rows_.chunks = chunks;
  tokens_ = reinterpret_cast<const int32_t*>(at(at_tokens));
  // Each RoPE table's cos/sin rows at this step's positions, made on the device as the body's first kernels
  // (begin_recording): a 4k-token prompt took 9.5 ms of host trigonometry here.
  for (const RopeTable* table : ropes_) {
    float* cs = scratch_.alloc<float>(2 * n * table->half());
    rope_rows_[table] = {cs, cs + n * table->half()};
  }
  state_ = reinterpret_cast<float* const*>(at(at_state));
  wanted_device_ = reinterpret_cast<const int32_t*>(at(at_wanted));
  for (size_t i = 0; i < tables_.size(); ++i)
    if (tables_[i].arena) tables_[i].pages = reinterpret_cast<const int32_t*>(at(pages_at[i]));
  for (auto& [rate, w] : work_) w.first = reinterpret_cast<const int32_t*>(at(work_at.at(rate)));
  routed_active_ = scratch_.alloc<int32_t>(cfg_.num_hidden_layers);

  if (decode && graphs_ && graphs_->enabled() && !(clock_ && clock_->on())) graph_ = &graphs_->entry(shape);
}

bool CudaBackend::replay_step(Tensor& logits) {
  if (!graph_ || !graph_->exec) return false;
  STRATA_CUDA_CHECK(cudaGraphLaunch(graph_->exec, stream_));
  scratch_.release(graph_->after);
  routed_experts_ = graph_->routed;
  logits = {graph_->logits, graph_->logits_rows, graph_->logits_cols};
  graphs_->count_replay();
  return true;
}

void CudaBackend::begin_recording(bool observed) {
  body_recordable_ = true;
  if (graph_ && observed) graph_ = nullptr;  // an observed step reads the streams home after each layer
  if (graph_ && graph_->runs++ > 0 && graph_->recordable) {  // the first run is eager (see step_graphs.h)
    STRATA_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    capturing_ = true;
  }
  for (const RopeTable* table : ropes_) {
    const auto& [cos, sin] = rope_rows_.at(table);
    rope_cos_sin(rows_.position, rows_.rows, weights_.vec(table->inv_freq), table->half(), table->attention_scaling,
                 cos, sin, stream_);
  }
}

void CudaBackend::not_recordable(const char* why) {
  body_recordable_ = false;
  if (capturing_) fail("CUDA graphs: a recorded decode step took a path that cannot be recorded (", why, ")");
}

void CudaBackend::end_recording(const Tensor& logits) {
  if (!graph_) return;
  if (!capturing_) {
    graph_->recordable = graph_->recordable && body_recordable_;
    return;
  }
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  STRATA_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  STRATA_CUDA_CHECK(made);
  graph_->exec = exec;
  graph_->after = scratch_.mark();
  graph_->logits = logits.data;
  graph_->logits_rows = logits.rows;
  graph_->logits_cols = logits.cols;
  graph_->routed = routed_experts_;
  // Captured, not run: this step runs the recording now.
  STRATA_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
}

CudaBackend::~CudaBackend() {
  if (capturing_) {  // an error inside a captured body: leave the stream usable
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
}

void CudaBackend::end_step(const Step& step) {
  // The host's counters follow the device: entries closed and tokens pending after this step.
  for (int64_t c = 0; c < step.rows.chunks(); ++c) {
    const int64_t end = step.rows.pos0[c] + step.rows.count[c];
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
      for (CompressorSlot slot : {CompressorSlot::Attention, CompressorSlot::Indexer}) {
        CompressorState& st = compressor_of(step.layer_state(c, l), slot);
        if (!st.rate) continue;
        st.n_entries = end / st.rate;
        st.n_pending = end % st.rate;
        st.has_overlap = st.n_entries > 0;
      }
  }
  std::vector<int32_t> active(routed_experts_.size());
  if (!active.empty())
    STRATA_CUDA_CHECK(cudaMemcpyAsync(active.data(), routed_active_, active.size() * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (clock_) clock_->collect();
  for (size_t l = 0; l < routed_experts_.size(); ++l)
    if (routed_experts_[l] < 0) routed_experts_[l] = active[l] - (routed_experts_[l] == -2);
}

Mat CudaBackend::to_host(const Tensor& x) {
  const OpClock::Scope timed_op_(clock_, "to_host", rows_.rows, stream_);
  not_recordable("to_host");
  Mat m(x.rows, x.cols);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(m.v.data(), x.data, m.v.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return m;
}

const EntryTable& CudaBackend::entry_table(int64_t layer, CompressorSlot slot) const {
  return tables_[static_cast<size_t>(layer * 2 + (slot == CompressorSlot::Indexer))];
}

CudaBackend::Tensor CudaBackend::embed(const WeightRef& table, const std::vector<int32_t>& tokens, int64_t copies) {
  STRATA_TIMED_OP("embed");
  const DeviceMatrix& t = weights_.matrix(table);
  Tensor out = tensor(static_cast<int64_t>(tokens.size()), copies * t.cols);
  cuda::embed(t.data, t.type, tokens_, out.data, out.rows, t.cols, copies, stream_);
  return out;
}

// Whether prefill-sized products with FP8 weights use cuBLASLt's FP8 GEMM (activations quantized to e4m3) or the
// dequantized-bf16 fallback. Off: on the H200 (2026-11-29) Gemm::fp8 matched its reference for every k of 512 and
// more, but cuBLASLt returned an algorithm for k = 256 whose results were garbage, and the whole-model check ran with
// those products in it; Gemm::fp8_supported now refuses such k, and switching this on waits for a whole-model run
// (branch fp8-wip). Decode-sized products are weight-only FP8 either way.
constexpr bool kFp8GemmInModel = false;

GemmType CudaBackend::operand_type(const DeviceMatrix& w, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw,
                                   int64_t ldy) {
  if (w.type != GemmType::Fp8) return w.type;
  return kFp8GemmInModel && m > kGemvMaxRows && gemm_.fp8_supported(m, n, k, ldx, ldw, ldy) ? GemmType::Fp8
                                                                                              : GemmType::Bf16;
}

CudaBackend::Operand CudaBackend::operand(const float* x, int64_t m, int64_t k, GemmType type) {
  if (type == GemmType::Fp32) return {x, nullptr, GemmType::Fp32};
  const auto key = std::pair{x, type};
  if (const auto it = converted_.find(key); it != converted_.end() && it->second.first == std::pair{m, k})
    return it->second.second;
  Operand o{gemm_operand((type == GemmType::Fp8 ? fp8_padded_rows(m) : m) * k, type), nullptr, type};
  if (type == GemmType::Fp8) {
    float* scales = scratch_.alloc<float>(fp8_padded_rows(m) * ((k + kFp8Block - 1) / kFp8Block));
    quantize_fp8_rows(x, k, m, k, static_cast<uint8_t*>(const_cast<void*>(o.data)), scales, stream_);
    o.scales = scales;
  } else {
    to_gemm_input(x, const_cast<void*>(o.data), m * k, type, stream_);
  }
  converted_[key] = {{m, k}, o};
  return o;
}

void CudaBackend::changed(const float* x) {
  for (const GemmType t : {GemmType::Bf16, GemmType::Fp32, GemmType::Fp8}) converted_.erase({x, t});
}

void CudaBackend::product(const Operand& x, int64_t m, const DeviceMatrix& w, float* y) {
  if (w.type != GemmType::Fp8) {
    if (x.type != w.type) fail("CUDA product: a ", gemm_type_name(x.type), " operand for ", gemm_type_name(w.type), " weights");
    if (gemv_applies(w.type, x.data, w.cols, 0, w.data, w.cols, 0, m, w.cols))
      gemv(w.type, x.data, w.cols, 0, w.data, w.cols, 0, y, w.rows, 0, m, w.rows, w.cols, 1, stream_);
    else
      gemm_.run(w.type, x.data, w.cols, w.data, w.cols, y, w.rows, m, w.rows, w.cols, stream_);
    return;
  }
  if (x.type == GemmType::Fp8) {
    gemm_.fp8(x.data, w.cols, x.scales, w.data, w.cols, w.scales, y, w.rows, m, w.rows, w.cols, stream_);
    return;
  }
  if (x.type != GemmType::Bf16) fail("CUDA product: a ", gemm_type_name(x.type), " operand for FP8 weights");
  const auto* xb = static_cast<const __nv_bfloat16*>(x.data);
  if (gemv_fp8_applies(x.data, w.cols, 0, w.data, w.cols, 0, m, w.cols)) {
    gemv_fp8(xb, w.cols, 0, static_cast<const uint8_t*>(w.data), w.cols, 0, w.scales, w.scale_cols(), 0, y, w.rows, 0,
             m, w.rows, w.cols, 1, stream_);
    return;
  }
  // A shape neither FP8 kernel takes (partial 128-blocks; not V4-Flash's): this layer's copy of the weights in bf16.
  auto* wb = scratch_.alloc<__nv_bfloat16>(w.rows * w.cols);
  dequantize_fp8(static_cast<const uint8_t*>(w.data), w.scales, w.rows, w.cols, wb, stream_);
  gemm_.run(GemmType::Bf16, x.data, w.cols, wb, w.cols, y, w.rows, m, w.rows, w.cols, stream_);
}

CudaBackend::Tensor CudaBackend::linear(const Tensor& x, const WeightRef& w) {
  STRATA_TIMED_OP("linear");
  const DeviceMatrix& d = weights_.matrix(w);
  if (d.cols != x.cols) fail("CUDA linear: input width ", x.cols, " against a weight of ", d.rows, "x", d.cols);
  const Operand xin = operand(x.data, x.rows, x.cols, operand_type(d, x.rows));
  Tensor y = tensor(x.rows, d.rows);
  product(xin, x.rows, d, y.data);
  return y;
}

std::vector<CudaBackend::Tensor> CudaBackend::linear_many(const Tensor& x, const std::vector<const WeightRef*>& ws) {
  std::vector<Tensor> out;
  // Decode sizes: every product in one GEMV launch (gemv_many gives each the bits gemv gives), when the weights
  // share a type the GEMV reads (bf16 or fp32: FP8 weights take gemv_fp8, one launch each).
  std::vector<const DeviceMatrix*> d;
  for (const WeightRef* w : ws) d.push_back(&weights_.matrix(*w));
  const bool one_type = !d.empty() && std::all_of(d.begin(), d.end(), [&](const DeviceMatrix* m) {
    return m->type == d[0]->type && m->type != GemmType::Fp8 && m->cols == x.cols;
  });
  if (one_type && x.rows <= kGemvMaxRows && static_cast<int64_t>(d.size()) <= kGemvMaxTargets) {
    STRATA_TIMED_OP("linear_many");
    const Operand xin = operand(x.data, x.rows, x.cols, d[0]->type);
    std::vector<GemvTarget> targets;
    for (const DeviceMatrix* m : d) targets.push_back({m->data, m->rows, nullptr});
    if (gemv_many_applies(d[0]->type, xin.data, x.rows, x.cols, targets.data(), static_cast<int>(targets.size()))) {
      for (size_t i = 0; i < d.size(); ++i) {
        out.push_back(tensor(x.rows, d[i]->rows));
        targets[i].y = out.back().data;
      }
      gemv_many(d[0]->type, xin.data, x.rows, x.cols, targets.data(), static_cast<int>(targets.size()), stream_);
      return out;
    }
  }
  for (const WeightRef* w : ws) out.push_back(linear(x, *w));
  return out;
}

CudaBackend::Tensor CudaBackend::grouped_linear(const Tensor& x, const WeightRef& w, int64_t groups) {
  STRATA_TIMED_OP("grouped_linear");
  const DeviceMatrix& d = weights_.matrix(w);
  const int64_t group_in = x.cols / groups, rank = d.rows / groups;
  if (d.cols != group_in) fail("CUDA grouped linear: group width ", group_in, " against a weight of ", d.rows, "x", d.cols);
  Tensor y = tensor(x.rows, groups * rank);
  if (d.type == GemmType::Fp8) {
    // Uploaded as FP8 only with whole 128-blocks per group (DeviceWeights), so group g's weight scales are block
    // rows [g·rank/128, …) of the matrix's, and its activation scales block rows [g·group_in/128, …) of x's.
    const int64_t scale_stride = rank / kFp8Block * d.scale_cols();
    // Group g's weight scales start g·scale_stride floats in: the FP8 GEMM wants them 16-byte aligned (the
    // activations' start at (g·group_in/128) times a padded row count, always aligned).
    const bool scales_aligned = scale_stride % 4 == 0;
    const GemmType in_type =
        scales_aligned ? operand_type(d, x.rows, rank, group_in, x.cols, group_in, y.cols) : GemmType::Bf16;
    const Operand xin = operand(x.data, x.rows, x.cols, in_type);
    const auto* codes = static_cast<const uint8_t*>(d.data);
    if (xin.type == GemmType::Fp8) {
      for (int64_t g = 0; g < groups; ++g)
        gemm_.fp8(static_cast<const uint8_t*>(xin.data) + g * group_in, x.cols,
                  xin.scales + g * (group_in / kFp8Block) * fp8_padded_rows(x.rows), codes + g * rank * group_in, group_in,
                  d.scales + g * scale_stride, y.data + g * rank, y.cols, x.rows, rank, group_in, stream_);
    } else if (gemv_fp8_applies(xin.data, x.cols, group_in, d.data, group_in, rank * group_in, x.rows, group_in)) {
      gemv_fp8(static_cast<const __nv_bfloat16*>(xin.data), x.cols, group_in, codes, group_in, rank * group_in,
               d.scales, d.scale_cols(), scale_stride, y.data, y.cols, rank, x.rows, rank, group_in, groups, stream_);
    } else {
      auto* wb = scratch_.alloc<__nv_bfloat16>(d.rows * d.cols);
      dequantize_fp8(codes, d.scales, d.rows, d.cols, wb, stream_);
      gemm_.run_batched(GemmType::Bf16, xin.data, x.cols, group_in, wb, group_in, rank * group_in, y.data, y.cols,
                        rank, x.rows, rank, group_in, groups, stream_);
    }
    return y;
  }
  const void* xin = operand(x.data, x.rows, x.cols, d.type).data;
  // One strided-batched product: group g reads x's columns [g·in, (g+1)·in) and w's rows [g·rank, (g+1)·rank).
  if (gemv_applies(d.type, xin, x.cols, group_in, d.data, group_in, rank * group_in, x.rows, group_in))
    gemv(d.type, xin, x.cols, group_in, d.data, group_in, rank * group_in, y.data, y.cols, rank, x.rows, rank, group_in,
         groups, stream_);
  else
    gemm_.run_batched(d.type, xin, x.cols, group_in, d.data, group_in, rank * group_in, y.data, y.cols, rank, x.rows,
                      rank, group_in, groups, stream_);
  return y;
}

void CudaBackend::rms_norm_rows(Tensor& x, const std::vector<float>* weight, double eps) {
  STRATA_TIMED_OP("rms_norm");
  changed(x.data);
  cuda::rms_norm(x.data, weight ? weights_.vec(*weight) : nullptr, x.data, x.rows, x.cols, static_cast<float>(eps),
                 stream_);
}

void CudaBackend::head_rms_norm(Tensor& x, int64_t head_dim, double eps) {
  STRATA_TIMED_OP("head_rms_norm");
  changed(x.data);
  cuda::rms_norm(x.data, nullptr, x.data, x.rows * (x.cols / head_dim), head_dim, static_cast<float>(eps), stream_);
}

void CudaBackend::rope(Tensor& x, int64_t head_dim, const RopeTable& table, const Step&, bool inverse) {
  STRATA_TIMED_OP("rope");
  changed(x.data);
  const auto it = rope_rows_.find(&table);
  if (it == rope_rows_.end()) fail("CUDA rope: a RoPE table the backend was not given");
  const int64_t half = table.half();
  rope_interleaved(x.data, x.rows, x.cols / head_dim, head_dim, head_dim - 2 * half, half, it->second.first,
                   it->second.second, inverse, stream_);
}

CudaBackend::Mix CudaBackend::hc_pre(const HyperConnectionWeights& w, const Tensor& streams, Tensor& collapsed,
                                     const ModelConfig& cfg) {
  STRATA_TIMED_OP("hc_pre");
  const int64_t hc = cfg.hc_mult, d = cfg.hidden_size;
  collapsed = tensor(streams.rows, d);
  Mix m{scratch_.alloc<float>(streams.rows * (hc + hc * hc)), hc};
  // Above decode sizes the mixes fn · streams are one fp32 GEMM (true fp32, as the slice kernel's sums).
  const int64_t n = (2 + hc) * hc;
  float* mixes = nullptr;
  if (streams.rows > kGemvMaxRows) {
    mixes = scratch_.alloc<float>(streams.rows * n);
    gemm_.run(GemmType::Fp32, streams.data, hc * d, weights_.vec(w.fn), hc * d, mixes, n, streams.rows, n, hc * d,
              stream_);
  }
  cuda::hc_pre(streams.data, weights_.vec(w.fn), weights_.vec(w.base), weights_.vec(w.scale), collapsed.data, m.data,
               streams.rows, hc, d, static_cast<float>(cfg.rms_norm_eps), static_cast<float>(cfg.hc_eps),
               cfg.hc_sinkhorn_iters, scratch_.alloc<float>(mix_partial_floats(streams.rows, n, hc * d)), stream_,
               mixes);
  return m;
}

void CudaBackend::hc_post(const Mix& mix, const Tensor& block_out, Tensor& streams) {
  STRATA_TIMED_OP("hc_post");
  changed(streams.data);
  cuda::hc_post(mix.data, block_out.data, streams.data, streams.rows, mix.hc, block_out.cols, stream_);
}

CudaBackend::Tensor CudaBackend::hyper_head(const ModelWeights& w, const Tensor& streams,
                                            const std::vector<int64_t>& rows, const ModelConfig& cfg) {
  STRATA_TIMED_OP("hyper_head");
  const int64_t d = cfg.hidden_size;
  Tensor y = tensor(static_cast<int64_t>(rows.size()), d);
  // begin_step uploaded the rows a step asks for; another list (no caller today) goes up here, unrecorded.
  const int32_t* index = wanted_device_;
  if (rows != *wanted_) {
    not_recordable("hyper_head rows");
    index = upload(std::vector<int32_t>(rows.begin(), rows.end()));
  }
  cuda::hyper_head(streams.data, index, weights_.vec(w.hc_head_fn), weights_.vec(w.hc_head_base),
                   weights_.vec(w.hc_head_scale), y.data, y.rows, cfg.hc_mult, d,
                   static_cast<float>(cfg.rms_norm_eps), static_cast<float>(cfg.hc_eps),
                   scratch_.alloc<float>(mix_partial_floats(y.rows, cfg.hc_mult, cfg.hc_mult * d)), stream_);
  return y;
}

void CudaBackend::compress(const CompressorWeights& w, const Tensor& kv, const Tensor& gate, const Step&,
                           int64_t layer, CompressorSlot slot, const RopeTable& rope, double eps) {
  STRATA_TIMED_OP("compress");
  const CompressorOffsets& o =
      slot == CompressorSlot::Attention ? layout_[static_cast<size_t>(layer)].compressor : layout_[static_cast<size_t>(layer)].indexer;
  CompressorStep c;
  c.kv = kv.data;
  c.gate = gate.data;
  c.ape = weights_.vec(w.ape);
  c.norm = weights_.vec(w.norm);
  c.state = state_;
  c.pending_kv = o.pending_kv;
  c.pending_gate = o.pending_gate;
  c.overlap_kv = o.overlap_kv;
  c.overlap_gate = o.overlap_gate;
  c.rate = w.rate;
  c.width = w.overlap ? 2 * w.dim : w.dim;
  c.dim = w.dim;
  c.overlap = w.overlap;
  c.inv_freq = weights_.vec(rope.inv_freq);
  c.rope_half = rope.half();
  c.rope_scaling = rope.attention_scaling;
  c.eps = static_cast<float>(eps);
  c.entries = entry_table(layer, slot);
  c.entries_out = const_cast<float*>(c.entries.arena);
  const auto& [work, n_work] = work_.at(w.rate);
  cuda::compress(c, rows_, work, n_work, stream_);
}

CudaBackend::Picks CudaBackend::indexer_topk(const Tensor& q, const Tensor& head_w, const Step&, int64_t layer,
                                             const ModelConfig& cfg) {
  STRATA_TIMED_OP("indexer_topk");
  const EntryTable& t = entry_table(layer, CompressorSlot::Indexer);
  const int64_t rate = cfg.csa_compress_rate;
  const int64_t max_visible = closed_max_.at(rate);
  Picks p{scratch_.alloc<int32_t>(q.rows * cfg.index_topk), scratch_.alloc<int32_t>(q.rows), cfg.index_topk};
  float* scores = scratch_.alloc<float>(std::max<int64_t>(1, q.rows * max_visible));
  cuda::indexer_topk(q.data, head_w.data, t, rows_, rate, cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk,
                     max_visible, scores, p.index, p.count, stream_);
  return p;
}

CudaBackend::Tensor CudaBackend::sparse_attention(const Tensor& q, const Tensor& kv, const std::vector<float>& sinks,
                                                  AttentionKeys keys_kind, const Picks& picks, const Step&,
                                                  int64_t layer, const ModelConfig& cfg) {
  STRATA_TIMED_OP("sparse_attention");
  const int64_t n = q.rows, heads = cfg.num_attention_heads, hd = cfg.head_dim, window = cfg.sliding_window;
  KeyEntries mode = KeyEntries::None;
  int64_t rate = 1, extra = 0;
  if (keys_kind == AttentionKeys::WindowAndPicked) {
    mode = KeyEntries::Picked;
    rate = cfg.csa_compress_rate;
    extra = picks.topk;
  } else if (keys_kind == AttentionKeys::WindowAndAllEntries) {
    mode = KeyEntries::All;
    rate = cfg.hca_compress_rate;
    extra = closed_max_.at(rate);
  }
  const int64_t max_keys = window + extra;
  const float** keys = scratch_.alloc<const float*>(n * max_keys);
  int32_t* key_count = scratch_.alloc<int32_t>(n);
  attention_keys(kv.data, state_, layout_[static_cast<size_t>(layer)].swa, window, hd, mode,
                 entry_table(layer, CompressorSlot::Attention), rate, picks.index, picks.count, picks.topk, rows_,
                 max_keys, keys, key_count, stream_);
  Tensor out = tensor(n, heads * hd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (n > kSplitKeysMaxRows && weights_.type() != GemmType::Fp32 && attention_mma_supported(hd))
    sparse_attention_mma(q.data, keys, key_count, max_keys, weights_.vec(sinks), out.data, n, heads, hd, scale, stream_);
  else if (n <= kSplitKeysMaxRows)
    sparse_attention_split(q.data, keys, key_count, max_keys, weights_.vec(sinks), out.data, n, heads, hd, scale,
                           scratch_.alloc<float>(attention_split_floats(n, heads, hd, max_keys)), stream_);
  else
    cuda::sparse_attention(q.data, keys, key_count, max_keys, weights_.vec(sinks), out.data, n, heads, hd, scale,
                           stream_);
  return out;
}

void CudaBackend::update_window(const Tensor& kv, const Step&, int64_t layer, int64_t window) {
  STRATA_TIMED_OP("update_window");
  cuda::update_window(kv.data, state_, layout_[static_cast<size_t>(layer)].swa, window, kv.cols, rows_, stream_);
}

CudaBackend::Routing CudaBackend::route(const Tensor& logits, const MoeWeights& w, const std::vector<int32_t>&,
                                        const ModelConfig& cfg) {
  STRATA_TIMED_OP("route");
  const int64_t n = logits.rows, k = cfg.num_experts_per_tok;
  Routing r{scratch_.alloc<int32_t>(n * k), scratch_.alloc<float>(n * k), n, k};
  float* scores = scratch_.alloc<float>(n * logits.cols);
  const int scoring = cfg.scoring_func == model::ScoringFunc::SqrtSoftplus ? 0
                      : cfg.scoring_func == model::ScoringFunc::Sigmoid    ? 1
                                                                           : 2;
  cuda::route(logits.data, weights_.vec(w.gate_bias), weights_.ints(w.tid2eid), tokens_, n, logits.cols, k, scoring,
              static_cast<float>(cfg.routed_scaling_factor), scores, r.ids, r.weights, stream_);
  return r;
}

void CudaBackend::swiglu_expert(const ExpertWeights& w, Operand x, int64_t m, float* y, double limit) {
  const DeviceMatrix &w1 = weights_.matrix(w.w1), &w3 = weights_.matrix(w.w3), &w2 = weights_.matrix(w.w2);
  if (x.type == GemmType::Fp32 && w1.type != GemmType::Fp32)
    x = operand(static_cast<const float*>(x.data), m, w1.cols, operand_type(w1, m));
  if (w3.type != w1.type) fail("CUDA experts: w1 and w3 of one expert must have one type");
  float* g = scratch_.alloc<float>(m * w1.rows);
  float* u = scratch_.alloc<float>(m * w3.rows);
  product(x, m, w1, g);
  product(x, m, w3, u);
  // FP8 down projections quantize h themselves (operand()), so h is fp32 for them; otherwise their own operand.
  const GemmType h_type = w2.type == GemmType::Fp8 ? GemmType::Fp32 : w2.type;
  void* h = gemm_operand(m * w1.rows, h_type);
  swiglu(g, u, h, m * w1.rows, static_cast<float>(limit), h_type, stream_);
  Operand hin{h, nullptr, h_type};
  if (w2.type == GemmType::Fp8) hin = operand(static_cast<const float*>(h), m, w1.rows, operand_type(w2, m));
  product(hin, m, w2, y);
}

// Decode-sized steps: routing grouped on the device and two grouped launches (moe.h), no host round trip. Larger
// steps: the routing comes back to the host, which groups rows by expert, then one cuBLASLt chain per expert with
// rows — at prefill sizes each expert has enough rows for a real GEMM and one sync per layer is noise.
CudaBackend::Tensor CudaBackend::experts(const Tensor& x, const Routing& routing, const MoeWeights& w,
                                         const ModelConfig& cfg) {
  STRATA_TIMED_OP("experts");
  const int64_t n = x.rows, d = x.cols, k = routing.k;
  const int64_t n_experts = static_cast<int64_t>(w.experts.size());
  const int64_t inter = n_experts ? w.experts[0].w1.rows : 0;
  // One launch per projection over every routed (row, expert) pair, grouped by expert on the device; the per-expert
  // loop below is left for the shapes the grouped kernels do not take.
  const DeviceWeights::ExpertTables* tables = n_experts ? &weights_.experts(w) : nullptr;
  const int64_t slots = k + (tables && tables->with_shared);  // per row: its routed experts, then the shared one
  // The grouped kernels' operands: fp32 for fp32 weights, else bf16 (FP8 experts are weight-only there).
  const GemmType grouped_in = tables && tables->type == GemmType::Fp32 ? GemmType::Fp32 : GemmType::Bf16;
  const int64_t pairs = n * slots, planned = n_experts + (tables && tables->with_shared);
  const int64_t max_tiles = moe_max_tiles(pairs, planned, kMoeGemmTileTokens);
  // Many tokens per expert (prefill, large batches): GEMM tiles over a plan of any size (moe_gemm.h). Else, up to
  // the single-block plan's size, the grouped kernels that stream each expert's weights once per step.
  const bool tiled = tables && moe_gemm_supported(tables->type, d, inter, max_tiles) &&
                     moe_gemm_pays(tables->type, pairs, planned);
  const bool streamed = tables && pairs <= std::min(kMoePlanMaxPairs, 8 * n_experts) &&
                        moe_grouped_supported(tables->type, d, inter);
  if (tiled || streamed) {
    MoePlan plan{scratch_.alloc<int32_t>(pairs),  scratch_.alloc<int32_t>(planned + 1),
                 scratch_.alloc<int32_t>(planned), routed_active_ + routed_experts_.size(),
                 scratch_.alloc<int32_t>(pairs),  scratch_.alloc<float>(pairs)};
    routed_experts_.push_back(tables->with_shared ? -2 : -1);  // counted on the device (the shared one too)
    MoeTiles tiles;
    if (tiled) {
      tiles = {scratch_.alloc<int32_t>(max_tiles), scratch_.alloc<int32_t>(max_tiles), scratch_.alloc<int32_t>(1)};
      moe_plan_tiled(routing.ids, routing.weights, n, k, n_experts, tables->with_shared, plan, tiles,
                     kMoeGemmTileTokens, scratch_.alloc<int32_t>(moe_plan_work_ints(n, n_experts)), stream_);
    } else {
      moe_plan(routing.ids, routing.weights, n, k, n_experts, tables->with_shared, plan, stream_);
    }
    const int64_t max_active = std::min(planned, pairs);
    void* h = gemm_operand(pairs * inter, grouped_in);
    const void* xg = operand(x.data, n, d, grouped_in).data;
    float* routed = scratch_.alloc<float>(pairs * d);
    const auto limit = static_cast<float>(cfg.swiglu_limit);
    if (tiled) {
      moe_gate_up_gemm(tables->type, static_cast<const __nv_bfloat16*>(xg), plan, tiles, max_tiles, tables->w1,
                       tables->w3, tables->s1, tables->s3, d, inter, limit, static_cast<__nv_bfloat16*>(h), stream_);
      moe_down_gemm(tables->type, static_cast<const __nv_bfloat16*>(h), plan, tiles, max_tiles, tables->w2,
                    tables->s2, inter, d, routed, stream_);
    } else if (tables->type == GemmType::Bf16 && moe_mma_supported(d, inter) && moe_mma_pays(pairs, planned)) {
      // Many tokens per expert: tensor cores (moe_mma.h), the weights streamed once per 32 tokens.
      moe_gate_up_mma(static_cast<const __nv_bfloat16*>(xg), plan, max_active, tables->w1, tables->w3, d, inter,
                      limit, static_cast<__nv_bfloat16*>(h), stream_);
      moe_down_mma(static_cast<const __nv_bfloat16*>(h), plan, max_active, tables->w2, inter, d, routed, stream_);
    } else {
      moe_gate_up(tables->type, xg, plan, max_active, tables->w1, tables->w3, tables->s1, tables->s3, d, inter, limit,
                  h, stream_);
      moe_down(tables->type, h, plan, max_active, tables->w2, tables->s2, inter, d, routed, stream_);
    }
    float* shared = nullptr;
    if (w.shared && !tables->with_shared) {
      shared = scratch_.alloc<float>(n * d);
      swiglu_expert(*w.shared, {x.data, nullptr, GemmType::Fp32}, n, shared, cfg.swiglu_limit);
    }
    Tensor out = tensor(n, d);
    moe_combine(shared, routed, plan.slot, plan.slot_weight, out.data, n, slots, d, stream_);
    return out;
  }

  not_recordable("experts grouped on the host");
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<float> weight(ids.size());
  STRATA_CUDA_CHECK(cudaMemcpyAsync(ids.data(), routing.ids, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaMemcpyAsync(weight.data(), routing.weights, weight.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));

  // Rows of each expert in row order; each (row, expert) pair gets a slot in the routed output.
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(n_experts));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) rows_of[static_cast<size_t>(ids[static_cast<size_t>(r * k + j)])].push_back(static_cast<int32_t>(r));
  std::vector<int32_t> gather, start(static_cast<size_t>(n_experts + 1), 0);
  for (int64_t e = 0; e < n_experts; ++e) {
    start[static_cast<size_t>(e)] = static_cast<int32_t>(gather.size());
    gather.insert(gather.end(), rows_of[static_cast<size_t>(e)].begin(), rows_of[static_cast<size_t>(e)].end());
  }
  start[static_cast<size_t>(n_experts)] = static_cast<int32_t>(gather.size());
  // Each row sums its experts in ascending expert order, as the CPU reference does.
  std::vector<int32_t> slot(static_cast<size_t>(n * k));
  std::vector<float> slot_weight(slot.size());
  std::vector<int32_t> next(start.begin(), start.end() - 1);
  for (int64_t r = 0; r < n; ++r) {
    std::vector<std::pair<int32_t, float>> mine;
    for (int64_t j = 0; j < k; ++j) mine.emplace_back(ids[static_cast<size_t>(r * k + j)], weight[static_cast<size_t>(r * k + j)]);
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (int64_t j = 0; j < k; ++j) {
      slot[static_cast<size_t>(r * k + j)] = next[static_cast<size_t>(mine[static_cast<size_t>(j)].first)]++;
      slot_weight[static_cast<size_t>(r * k + j)] = mine[static_cast<size_t>(j)].second;
    }
  }

  routed_experts_.push_back(std::count_if(rows_of.begin(), rows_of.end(), [](const auto& r) { return !r.empty(); }));
  const int64_t total = static_cast<int64_t>(gather.size());
  // Rows gathered as the experts' operand (bf16/fp32), or as fp32 for FP8 experts, whose products quantize each
  // expert's rows themselves.
  const GemmType routed_type = n_experts ? weights_.matrix(w.experts[0].w1).type : GemmType::Fp32;
  const GemmType gathered = routed_type == GemmType::Fp8 ? GemmType::Fp32 : routed_type;
  const auto size = static_cast<int64_t>(gemm_type_size(gathered));
  auto* xg = static_cast<char*>(gemm_operand(std::max<int64_t>(1, total) * d, gathered));
  gather_rows(x.data, upload(gather), xg, total, d, gathered, stream_);
  float* routed = scratch_.alloc<float>(std::max<int64_t>(1, total) * d);
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t m = start[static_cast<size_t>(e + 1)] - start[static_cast<size_t>(e)];
    if (m == 0) continue;
    swiglu_expert(w.experts[static_cast<size_t>(e)], {xg + start[static_cast<size_t>(e)] * d * size, nullptr, gathered},
                  m, routed + start[static_cast<size_t>(e)] * d, cfg.swiglu_limit);
  }
  float* shared = nullptr;
  if (w.shared) {
    shared = scratch_.alloc<float>(n * d);
    swiglu_expert(*w.shared, {x.data, nullptr, GemmType::Fp32}, n, shared, cfg.swiglu_limit);
  }
  Tensor out = tensor(n, d);
  moe_combine(shared, routed, upload(slot), upload(slot_weight), out.data, n, k, d, stream_);
  return out;
}

}  // namespace strata::cuda
