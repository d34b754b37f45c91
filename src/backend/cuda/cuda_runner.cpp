// The CUDA ForwardRunner: forward.h over CudaBackend, with the weights on the GPU and each sequence's fixed state in
// one device block.
#include <map>
#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_copies.h"
#include "backend/cuda/ipc_region.h"
#include "backend/cuda/staged_copy.h"
#include "model/deepseek_v4/model.h"

namespace strata::model::v4 {

namespace {

cuda::GemmType gemm_type(Precision p) {
  return p == Precision::Fp32 ? cuda::GemmType::Fp32 : p == Precision::Fp8 ? cuda::GemmType::Fp8 : cuda::GemmType::Bf16;
}

class CudaRunner : public ForwardRunner {
 public:
  CudaRunner(const Model::Parts& p, Precision precision, CudaSwitches cuda)
      : p_(p),
        weights_(p.w, gemm_type(precision), {&p.rope_main.inv_freq, &p.rope_compress.inv_freq}),
        graphs_(cuda.graphs),
        clock_(cuda.op_times),
        batch_invariant_(cuda.batch_invariant) {
    // A stream of its own (a recording cannot be made on the legacy stream); created blocking, so allocate_state's
    // legacy-stream memset still orders with the steps. Copies of state are queued on it too.
    STRATA_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  ~CudaRunner() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  StepLogits run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                      const LayerObserver& observe) override {
    cuda::CudaBackend backend(weights_, gemm_, scratch_, p_.layout, p_.cfg, {&p_.rope_main, &p_.rope_compress}, stream_,
                              &clock_);
    backend.set_host_staging(&staging_);
    backend.set_upload_staging(&upload_staging_);
    backend.set_mask_staging(&mask_staging_);
    backend.set_batch_invariant(batch_invariant_);
    backend.set_graphs(&graphs_);
    StepLogits out =
        Forward<cuda::CudaBackend>(p_.cfg, p_.w, p_.rope_main, p_.rope_compress, backend).run(chunks, stage, observe);
    routed_ = backend.routed_experts();
    return out;
  }
  // An MTP draft step (forward.h's Forward::draft): the backend sees the states through the MTP layer's one-layer
  // view of their fixed blocks (mtp_view_layout), so the layer ops read and write the MTP ring. Recorded like a
  // decode step (its input streams go up with the rows), in each MTP layer's own recordings: the layout differs.
  DraftOutput run_draft(std::vector<DraftChunk>& chunks, const LogitsStage& stage, int64_t mtp_layer) override {
    const StateLayout& view = p_.mtp_views.at(static_cast<size_t>(mtp_layer));
    cuda::CudaBackend backend(weights_, gemm_, scratch_, view, p_.cfg, {&p_.rope_main, &p_.rope_compress}, stream_,
                              &clock_);
    backend.set_host_staging(&staging_);
    backend.set_upload_staging(&upload_staging_);
    backend.set_mask_staging(&mask_staging_);
    backend.set_batch_invariant(batch_invariant_);
    std::unique_ptr<cuda::StepGraphs>& graphs = draft_graphs_[mtp_layer];
    if (!graphs) graphs = std::make_unique<cuda::StepGraphs>(graphs_.enabled());
    backend.set_graphs(graphs.get());
    return Forward<cuda::CudaBackend>(p_.cfg, p_.w, p_.rope_main, p_.rope_compress, backend)
        .draft(chunks, mtp_layer, view, stage);
  }
  std::vector<int64_t> routed_experts_last_forward() const override { return routed_; }
  // Main and draft steps.
  int64_t steps_replayed() const override {
    int64_t n = graphs_.replays();
    for (const auto& [layer, graphs] : draft_graphs_) n += graphs->replays();
    return n;
  }

  std::shared_ptr<float> allocate_state(int64_t floats) override {
    float* d = nullptr;
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, floats)) * sizeof(float);
    STRATA_CUDA_CHECK(cudaMalloc(&d, bytes));
    STRATA_CUDA_CHECK(cudaMemset(d, 0, bytes));
    return std::shared_ptr<float>(d, [](float* b) { cudaFree(b); });
  }

  // On the step stream, so a copy neither waits for nor holds up work the legacy stream would order it with.
  void copy_floats(float* dst, const float* src, int64_t n) override {
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_floats_many(const std::vector<DeviceCopy>& copies) override {
    std::vector<cuda::DeviceCopy> runs;
    runs.reserve(copies.size());
    for (const DeviceCopy& c : copies) runs.push_back({c.dst, c.src, c.n});
    cuda::copy_device_runs(runs, stream_);
  }
  std::unique_ptr<model::SharedRegion> make_shared_region(int64_t floats) override { return cuda::make_ipc_region(floats); }
  std::unique_ptr<model::SharedRegion> open_shared_region(const std::string& handle) override {
    return cuda::open_ipc_region(handle);
  }
  // Copies of state are queued on the step stream; another process must not see a region before they are done.
  void synchronize() override {
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }

  // Through pinned buffers (staged_copy.h); a copy the staging refuses (an address on the wrong side) is reported by
  // copy_checked, which names the kinds of memory involved.
  void to_host(float* dst, const float* src, int64_t n) override {
    if (!staged(dst, src, n, false)) copy_checked(dst, src, n, cudaMemcpyDeviceToHost);
  }
  void from_host(float* dst, const float* src, int64_t n) override {
    if (!staged(dst, src, n, true)) copy_checked(dst, src, n, cudaMemcpyHostToDevice);
  }
  void from_host_many(const std::vector<HostCopy>& copies, int64_t n) override {
    if (copies.empty()) return;
    std::vector<cuda::StagedCopier::Copy> staged_copies;
    for (const HostCopy& c : copies) {
      // Checked like a single copy: the host side must be pageable host memory, the other the device's.
      if (!stageable(c.device_dst, c.host_src, true)) {
        for (const HostCopy& d : copies) from_host(d.device_dst, d.host_src, n);
        return;
      }
      staged_copies.push_back({c.device_dst, c.host_src});
    }
    state_copies_.to_device_many(staged_copies, static_cast<size_t>(n) * sizeof(float), stream_);
  }
  static bool stageable(const float* dst, const float* src, bool to_device) {
    auto type_of = [](const void* p) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return cudaMemoryTypeUnregistered;
      }
      return a.type;
    };
    const void* host = to_device ? static_cast<const void*>(src) : dst;
    const void* device = to_device ? static_cast<const void*>(dst) : src;
    return type_of(host) == cudaMemoryTypeUnregistered && type_of(device) == cudaMemoryTypeDevice;
  }
  bool staged(float* dst, const float* src, int64_t n, bool to_device) {
    // The staging reads or writes the host side with memcpy: only when it is host memory and the other side the
    // device's (anything else is left to copy_checked, which fails with a message instead of a crash).
    if (!stageable(dst, src, to_device)) return false;
    try {
      const size_t bytes = static_cast<size_t>(n) * sizeof(float);
      if (to_device) state_copies_.to_device(dst, src, bytes, stream_);
      else state_copies_.to_host(dst, src, bytes, stream_);
      return true;
    } catch (const Error&) {
      cudaGetLastError();  // not sticky: cleared for copy_checked's own attempt and message
      return false;
    }
  }

  // A failed copy says which side was not what the caller thought (a host address where device memory belongs, or a
  // range past its allocation).
  static void copy_checked(float* dst, const float* src, int64_t n, cudaMemcpyKind kind) {
    const cudaError_t e = cudaMemcpy(dst, src, static_cast<size_t>(n) * sizeof(float), kind);
    if (e == cudaSuccess) return;
    cudaGetLastError();  // not sticky: clear it, so the next launch check does not report it again
    auto where = [](const void* p) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, p) != cudaSuccess) return std::string("unknown memory");
      return std::string(a.type == cudaMemoryTypeDevice ? "device" : a.type == cudaMemoryTypeHost ? "pinned host"
                         : a.type == cudaMemoryTypeManaged ? "managed" : "pageable host");
    };
    const std::string dst_kind = where(dst), src_kind = where(src);
    fail("CUDA state copy of ", n, " floats from ", src_kind, " memory to ", dst_kind, " memory failed: ",
         cudaGetErrorString(e));
  }

 private:
  const Model::Parts& p_;
  std::vector<int64_t> routed_;
  cuda::DeviceWeights weights_;
  cuda::Gemm gemm_;
  cuda::Scratch scratch_;
  cuda::HostStaging staging_;         // pinned memory for the logits that go home, kept between steps
  cuda::HostStaging upload_staging_;  // and for each step's uploads
  cuda::HostStaging mask_staging_;    // and for its allowed-token masks (late: after the forward is queued)
  cuda::StagedCopier state_copies_;   // state to and from host memory (prefix cache, snapshots)
  cuda::StepGraphs graphs_;           // recorded steps (step_graphs.h)
  std::map<int64_t, std::unique_ptr<cuda::StepGraphs>> draft_graphs_;  // recorded draft steps, per MTP layer
  cudaStream_t stream_ = nullptr;
  cuda::OpClock clock_;
  bool batch_invariant_ = false;  // --batch-invariant (CudaSwitches)
};

}  // namespace

std::unique_ptr<ForwardRunner> make_cuda_runner(const Model::Parts& parts, Precision precision, CudaSwitches cuda) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0)
    fail("--device cuda: no usable CUDA device (", e != cudaSuccess ? cudaGetErrorString(e) : "none found", ")");
  return std::make_unique<CudaRunner>(parts, precision, cuda);
}


}  // namespace strata::model::v4

namespace strata::model {

std::string cuda_device_name() {
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "";
  return prop.name;
}

}  // namespace strata::model
