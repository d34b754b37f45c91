// CudaBackend's step: begin_step's uploads (rows, fixed-state blocks, token block tables, the windows that close), the recording
// and replay of decode steps as CUDA graphs, end_step, to_host. Its ops are in one file per concept (linear.cpp,
// norm_rope.cpp, mhc.cpp, compressor.cpp, indexer.cpp, attention.cpp, moe.cpp; src/backend/README.md lists them);
// DeviceWeights is in device_weights.cpp.
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend_op.h"
#include "core/error.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

CudaBackend::CudaBackend(const DeviceWeights& weights, Gemm& gemm, Scratch& scratch,
                         const StateLayout& layout, const ModelConfig& cfg,
                         const std::vector<const RopeTable*>& ropes, cudaStream_t stream, OpClock* clock)
    : weights_(weights),
      gemm_(gemm),
      scratch_(scratch),
      layout_(layout),
      cfg_(cfg),
      ropes_(ropes),
      stream_(stream),
      clock_(clock) {}

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
  // A large block (an MTP draft's input streams: megabytes at a large batch) by reference: send() copies it
  // straight into the pinned staging, not through the pack first. `v` must outlive send().
  size_t add_by_reference(const std::vector<float>& v) {
    const size_t at = (bytes_.size() + 255) / 256 * 256;
    bytes_.resize(at + std::max<size_t>(1, v.size()) * sizeof(float));
    by_reference_.push_back({at, &v});
    return at;
  }
  // Copies everything to `device` (size() bytes) through pinned `staging`, or straight from pageable memory
  // without one (the driver has taken the bytes when the call returns).
  void send(char* device, HostStaging* staging, cudaStream_t stream) {
    char* from = bytes_.data();
    if (staging) {
      from = static_cast<char*>(staging->bytes(bytes_.size()));
      std::memcpy(from, bytes_.data(), by_reference_.empty() ? bytes_.size() : by_reference_.front().at);
      for (size_t i = 0; i < by_reference_.size(); ++i) {
        const Reference& r = by_reference_[i];
        const size_t bytes = r.v->size() * sizeof(float);
        std::memcpy(from + r.at, r.v->data(), bytes);
        const size_t next = i + 1 < by_reference_.size() ? by_reference_[i + 1].at : bytes_.size();
        std::memcpy(from + r.at + bytes, bytes_.data() + r.at + bytes, next - r.at - bytes);
      }
    } else {
      for (const Reference& r : by_reference_) std::memcpy(bytes_.data() + r.at, r.v->data(), r.v->size() * sizeof(float));
    }
    STRATA_CUDA_CHECK(cudaMemcpyAsync(device, from, bytes_.size(), cudaMemcpyHostToDevice, stream));
  }
  size_t size() const { return bytes_.size(); }

 private:
  struct Reference {
    size_t at;
    const std::vector<float>* v;
  };
  std::vector<char> bytes_;
  std::vector<Reference> by_reference_;
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
  // Steps of short chunks are recorded (step_graphs.h): decode steps, a decode with its drafts to verify, an MTP
  // draft step's catch-up and chain. Their shape is what the kernels' arguments depend on: the rows, the chunks, the
  // logits rows, the stream rows kept (the recording gathers them, keep_rows, from the row list uploaded here), the
  // host input's size (an MTP draft's streams), and the bounds below. Which chunk has how many rows is not part of
  // it: every kernel reads that from the rows uploaded here.
  bool short_chunks = true;
  for (int64_t c = 0; c < chunks; ++c) short_chunks = short_chunks && r.count[c] <= StepGraphs::kMaxChunkRows;
  std::vector<int64_t> shape{n, static_cast<int64_t>(step.stream_rows.size()), chunks,
                             static_cast<int64_t>(r.logits_rows.size()),
                             step.input ? static_cast<int64_t>(step.input->v.size()) : -1};

  UploadPack pack;
  auto ints = [](const std::vector<int64_t>& v) { return std::vector<int32_t>(v.begin(), v.end()); };
  const size_t at_position = pack.add(ints(r.position)), at_chunk = pack.add(ints(r.sequence)),
               at_first = pack.add(ints(r.first)), at_pos0 = pack.add(ints(r.pos0)), at_count = pack.add(ints(r.count)),
               at_tokens = pack.add(r.tokens);
  std::vector<float*> bases(static_cast<size_t>(chunks));
  std::vector<int32_t> floors(static_cast<size_t>(chunks));
  for (int64_t c = 0; c < chunks; ++c) {
    const SequenceState& s = step.state(c);
    if (s.layout != &layout_) fail("CUDA forward: sequence ", c, " has a state of another model or backend");
    bases[static_cast<size_t>(c)] = s.fixed.get();
    floors[static_cast<size_t>(c)] = static_cast<int32_t>(s.window_floor);
  }
  const size_t at_floor = pack.add(floors);
  const size_t at_state = pack.add(bases);
  // The rows whose logits the step computes (Forward::run asks hyper_head for them).
  wanted_ = &r.logits_rows;
  const size_t at_wanted = pack.add(std::vector<int32_t>(r.logits_rows.begin(), r.logits_rows.end()));
  kept_ = &step.stream_rows;
  const size_t at_kept = pack.add(std::vector<int32_t>(step.stream_rows.begin(), step.stream_rows.end()));
  input_ = step.input;
  const size_t at_input = input_ ? pack.add_by_reference(input_->v) : 0;

  // Token blocks: each chunk's block table (Forward::run made sure it holds this step's), padded to a bound,
  // uploaded once; every compressor's entries sit at its own offset in those blocks
  // (state_layout.h), so each gets an entry table over the same block ids. Windows that close this step, per rate,
  // padded to the most that can close (⌈count / rate⌉ per chunk) with (-1, 0) pairs. The layers are the layout's:
  // the model's, or the one window-only layer of an MTP view, whose states have no block pool (no entries).
  const int64_t layers = static_cast<int64_t>(layout_.layers.size());
  tables_.assign(static_cast<size_t>(layers * 2), EntryTable{});
  std::map<int64_t, size_t> work_at;
  BlockPool* pool = step.state(0).pool;
  int64_t max_blocks = 1;
  for (int64_t c = 0; c < chunks; ++c) {
    SequenceState& s = step.state(c);
    if (s.pool != pool) fail("CUDA forward: the sequences of one batch must share one block pool (a StatePool's)");
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(s.blocks.size()));
  }
  max_blocks = pages_bound(max_blocks);
  std::vector<int32_t> block_table(static_cast<size_t>(chunks * max_blocks), 0);
  for (int64_t c = 0; c < chunks; ++c)
    std::copy(step.state(c).blocks.begin(), step.state(c).blocks.end(), block_table.begin() + c * max_blocks);
  const size_t blocks_at = pack.add(block_table);
  shape.insert(shape.end(), {pool ? reinterpret_cast<intptr_t>(pool->base()) : 0, max_blocks});
  for (int64_t l = 0; l < layers; ++l)
    for (CompressorSlot slot : {CompressorSlot::Attention, CompressorSlot::Indexer}) {
      const CompressorLayout& cl = layout_.layers[static_cast<size_t>(l)].of(slot == CompressorSlot::Indexer);
      if (!cl) continue;
      if (!pool) fail("CUDA forward: sequence 0 has compressed entries in its layout but no block pool");
      EntryTable& t = tables_[static_cast<size_t>(l * 2 + (slot == CompressorSlot::Indexer))];
      t.arena = pool->base() + cl.block_offset;
      t.max_pages = max_blocks;
      t.page_floats = layout_.block_floats;
      t.per_page = cl.per_block;
      t.dim = cl.dim;
      if (!work_.count(cl.rate)) {
        std::vector<int32_t> work;
        int64_t most = 0, bound = 0;
        for (int64_t c = 0; c < chunks; ++c) {
          const int64_t e0 = r.pos0[c] / cl.rate, e1 = (r.pos0[c] + r.count[c]) / cl.rate;
          for (int64_t w = e0; w < e1; ++w)  // (a bounded replay's restored entries stay)
            if (!step.state(c).keeps_entry(w, cl.rate))
              work.insert(work.end(), {static_cast<int32_t>(c), static_cast<int32_t>(w)});
          most = std::max(most, e1);
          bound += (r.count[c] + cl.rate - 1) / cl.rate;
        }
        while (static_cast<int64_t>(work.size()) < 2 * bound) work.insert(work.end(), {-1, 0});
        work_at[cl.rate] = pack.add(work);
        work_[cl.rate] = {nullptr, bound};
        closed_max_[cl.rate] = entries_bound(most);
        shape.insert(shape.end(), {cl.rate, bound, closed_max_[cl.rate]});
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
  rows_.window_floor = reinterpret_cast<const int32_t*>(at(at_floor));
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
  kept_device_ = reinterpret_cast<const int32_t*>(at(at_kept));
  input_device_ = input_ ? reinterpret_cast<float*>(at(at_input)) : nullptr;
  for (EntryTable& t : tables_)
    if (t.arena) t.pages = reinterpret_cast<const int32_t*>(at(blocks_at));
  for (auto& [rate, w] : work_) w.first = reinterpret_cast<const int32_t*>(at(work_at.at(rate)));
  routed_active_ = scratch_.alloc<int32_t>(std::max<int64_t>(1, layers));

  if (short_chunks && graphs_ && graphs_->enabled() && !(clock_ && clock_->on())) graph_ = &graphs_->entry(shape);
}

bool CudaBackend::replay_step(Tensor& logits, Tensor& kept) {
  if (!graph_ || !graph_->exec) return false;
  STRATA_CUDA_CHECK(cudaGraphLaunch(graph_->exec, stream_));
  scratch_.release(graph_->after);
  routed_experts_ = graph_->routed;
  logits = {graph_->logits, graph_->logits_rows, graph_->logits_cols};
  kept = {graph_->kept, graph_->kept_rows, graph_->kept_cols};
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

void CudaBackend::end_recording(const Tensor& logits, const Tensor& kept) {
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
  graph_->kept = kept.data;
  graph_->kept_rows = kept.rows;
  graph_->kept_cols = kept.cols;
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

void CudaBackend::end_step(const Step&) {
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

CudaBackend::Tensor CudaBackend::from_host(const Mat& host) {
  const OpClock::Scope timed_op_(clock_, "from_host", rows_.rows, stream_);
  // The step's own input went up with its rows (begin_step): the tensor is that upload, which a recording keeps.
  if (&host == input_) return {input_device_, host.rows, host.cols};
  not_recordable("from_host");
  Tensor x = tensor(host.rows, host.cols);
  // From pageable memory the copy is staged before the call returns, so `host` may go away after it.
  if (!host.v.empty())
    STRATA_CUDA_CHECK(cudaMemcpyAsync(x.data, host.v.data(), host.v.size() * sizeof(float), cudaMemcpyHostToDevice,
                                      stream_));
  return x;
}

bool CudaBackend::computing() const {
  const cudaError_t e = cudaStreamQuery(stream_);
  if (e == cudaErrorNotReady) return true;
  STRATA_CUDA_CHECK(e);
  return false;
}

const EntryTable& CudaBackend::entry_table(int64_t layer, CompressorSlot slot) const {
  return tables_[static_cast<size_t>(layer * 2 + (slot == CompressorSlot::Indexer))];
}

}  // namespace strata::cuda
