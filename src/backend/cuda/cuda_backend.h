#pragma once
// The CUDA backend of the V4 forward (model/deepseek_v4/forward.h): the same ops as CpuBackend, on the GPU.
// Weights are uploaded once (matrices as bf16, fp32 or FP8 — each matrix carries its own type —, vectors as fp32);
// activations are fp32 tensors in a per-step scratch
// arena; each sequence's sliding window and compressor buffers live in one device block per sequence, and its
// compressed entries in the pool's device pages (the host keeps the page lists and counters).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/cuda/logits_out.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/op_clock.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/scratch.h"
#include "backend/cuda/step_graphs.h"
#include "backend/cuda/v4_kernels.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"
#include "model/logits_stage.h"

namespace strata::cuda {

struct DeviceMatrix {
  const void* data = nullptr;  // [rows, cols] row-major elements of `type`
  int64_t rows = 0, cols = 0;
  GemmType type = GemmType::Bf16;
  const float* scales = nullptr;  // Fp8: [ceil(rows/128), scale_cols()] block scales, row-major
  int64_t scale_cols() const { return (cols + 127) / 128; }
  // The address of element `i` (row-major): row or column blocks of the matrix.
  const void* at(int64_t i) const { return static_cast<const char*>(data) + i * static_cast<int64_t>(gemm_type_size(type)); }
};

// Every tensor of a ModelWeights on the device, looked up by its host address. Matrices are stored as `type`, except
// with Fp8: matrices the checkpoint stores as e4m3 with 128×128 block scales are uploaded as stored (codes and
// scales, no requantization), all others as bf16 — as are the embedding and the head, and any FP8 matrix whose
// 128-blocks would not line up with how it is used (a row slice off a block boundary; a grouped o-projection whose
// groups are not whole blocks; routed experts not all FP8).
// Defined in device_weights.cpp.
class DeviceWeights {
 public:
  DeviceWeights(const model::v4::ModelWeights& w, GemmType type,
                const std::vector<const std::vector<float>*>& extra = {});
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  const DeviceMatrix& matrix(const WeightRef& w) const;
  const float* vec(const std::vector<float>& v) const;
  const int32_t* ints(const std::vector<int32_t>& v) const;
  // Device tables of the routed experts' matrices (each expert's w1, w3 or w2), for the grouped kernels; the
  // shared expert, when it has the routed experts' shape, is one more entry at the end.
  struct ExpertTables {
    const void* const* w1 = nullptr;
    const void* const* w3 = nullptr;
    const void* const* w2 = nullptr;
    const float* const* s1 = nullptr;  // Fp8: each expert's block scales of w1, w3, w2
    const float* const* s3 = nullptr;
    const float* const* s2 = nullptr;
    GemmType type = GemmType::Bf16;  // every matrix of the tables has it
    bool with_shared = false;
  };
  const ExpertTables& experts(const model::v4::MoeWeights& w) const;
  int64_t bytes() const { return bytes_; }
  GemmType type() const { return type_; }

 private:
  // Uploads w as FP8 when fp8 allows it and the precision and the stored format do (see above), else as bf16/fp32.
  void add(const WeightRef& w, bool fp8 = true);
  bool fp8_storable(const WeightRef& w) const;
  void add(const std::vector<float>& v);
  std::map<const void*, DeviceMatrix> matrices_;
  std::map<const void*, const float*> vectors_;
  std::map<const void*, const int32_t*> ints_;
  std::map<const void*, ExpertTables> expert_tables_;  // by the address of MoeWeights::experts' first element
  std::vector<void*> allocations_;
  int64_t bytes_ = 0;
  GemmType type_;
};

class CudaBackend {
 public:
  struct Tensor {
    float* data = nullptr;
    int64_t rows = 0, cols = 0;
  };
  struct Mix {
    float* data = nullptr;  // [rows, hc + hc·hc]: post, then comb
    int64_t hc = 0;
  };
  struct Picks {
    int32_t* index = nullptr;  // [rows, topk]
    int32_t* count = nullptr;  // [rows]
    int64_t topk = 0;
  };
  struct Routing {
    int32_t* ids = nullptr;    // [rows, k]
    float* weights = nullptr;  // [rows, k]
    int64_t rows = 0, k = 0;
  };

  // `layout`: where each sequence's rings are in its fixed block, and its entries in token blocks (state_layout.h);
  // for an MTP draft step, mtp_view_layout's one-layer view of the MTP layer's ring (its states have no token
  // blocks: the layer is window-only).
  CudaBackend(const DeviceWeights& weights, Gemm& gemm, Scratch& scratch, const model::StateLayout& layout,
              const model::ModelConfig& cfg, const std::vector<const model::v4::RopeTable*>& ropes, cudaStream_t stream,
              OpClock* clock = nullptr);

  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // The step (cuda_backend.cpp; the end of a step's logits: cuda_backend_logits.cpp).
  void begin_step(const model::v4::Step& step);
  void end_step(const model::v4::Step& step);
  // Decode steps as CUDA graphs (step_graphs.h); `graphs` null or disabled: every step runs eagerly. Forward::run
  // asks replay_step first; when it answers false, the body runs between begin_recording and end_recording, which
  // capture it when this shape has run before. `kept`: the body's keep_rows result (empty when the step keeps no
  // stream rows), recorded with the logits so that a replayed step gives it too.
  void set_graphs(StepGraphs* graphs) { graphs_ = graphs; }
  // --batch-invariant (docs/batch_invariance.md): each op takes one kernel whatever the step's row count — the
  // GEMV kernels for every product, kGemvMaxRows rows at a time; the split-keys attention; the mHC slice kernel;
  // the device-grouped experts in chunks of rows — all of which sum a row in an order fixed by its own lengths.
  void set_batch_invariant(bool on) { invariant_ = on; }
  bool replay_step(Tensor& logits, Tensor& kept);
  void begin_recording(bool observed);
  void end_recording(const Tensor& logits, const Tensor& kept);
  void begin_layer() {
    layer_mark_ = scratch_.mark();
    converted_.clear();
  }
  void end_layer() {
    scratch_.release(layer_mark_);
    converted_.clear();
  }
  Mat to_host(const Tensor& x);
  // Host rows [rows, cols] into a new tensor (an MTP draft's input streams).
  Tensor from_host(const Mat& host);
  // Whether the device is still running what the step queued on its stream (a step's late masks, built on the CPU
  // after the forward was queued, were then hidden behind it).
  bool computing() const;
  // The end of a step (cuda_backend_logits.cpp): the listed rows of x home, through `staging` when set; then the
  // sampling stage on the device.
  void set_host_staging(HostStaging* staging) { staging_ = staging; }
  // Pinned memory for begin_step's uploads (the runner's, kept between steps; not the logits' staging, which the
  // end of a step may grow while the step's uploads are still being copied).
  void set_upload_staging(HostStaging* staging) { upload_staging_ = staging; }
  // Pinned memory for mask_rows' upload (the runner's, kept between steps): the masks are ready only after the
  // forward was queued (late masks), and a copy from pageable memory may hold the CPU until the copy engine gets to
  // it — behind the forward — while one from pinned memory returns at once. A buffer of its own, as begin_step's
  // uploads may still be on their way then.
  void set_mask_staging(HostStaging* staging) { mask_staging_ = staging; }
  Mat rows_to_host(const Tensor& x, const std::vector<int64_t>& rows);
  // The listed rows of x gathered on the device into a new tensor (the step's stream rows, kept past the layers for
  // the MTP layer): a kernel reading the row list begin_step uploaded, so a recorded step keeps them too.
  Tensor keep_rows(const Tensor& x, const std::vector<int64_t>& rows);
  // The sampling stage's logit processors, applied to the listed rows in place (sampling.cu).
  void apply_penalties(Tensor& x, const std::vector<int64_t>& rows,
                       const std::vector<const model::RowPenalties*>& penalties);
  // The allowed-token masks of the listed rows: their words go up in one copy with the row ids, and a kernel sets
  // every token a mask does not allow to -inf (sampling.cu).
  void mask_rows(Tensor& x, const std::vector<int64_t>& rows, const std::vector<const model::TokenMask*>& masks);
  // The listed rows' picks made on the device, only the ids coming home: greedy rows by their argmax, random ones
  // by sampling.cu's kernel; a row that kernel leaves to the host comes home and is picked there by the CPU
  // backend's reference op.
  std::vector<int32_t> pick_rows(const Tensor& x, const std::vector<int64_t>& rows,
                                 const std::vector<model::TokenPick>& picks);
  // The listed rows' top-token probabilities (cpu::top_probability) computed on the device, one float each home.
  std::vector<float> top_probabilities(const Tensor& x, const std::vector<int64_t>& rows);

  Tensor embed(const WeightRef& table, const std::vector<int32_t>& tokens, int64_t copies);
  // Products (and embed, above): linear.cpp.
  Tensor linear(const Tensor& x, const WeightRef& w);
  // x · wᵀ for each of several weights (the products of one block input; one launch at decode sizes).
  std::vector<Tensor> linear_many(const Tensor& x, const std::vector<const WeightRef*>& ws);
  Tensor grouped_linear(const Tensor& x, const WeightRef& w, int64_t groups);
  // Norms and RoPE: norm_rope.cpp.
  void rms_norm_rows(Tensor& x, const std::vector<float>* weight, double eps);
  void head_rms_norm(Tensor& x, int64_t head_dim, double eps);
  // KV rows stay as computed: the CUDA backend does not run DeepSeek's numerics (Precision::Official) yet, the only
  // ones that change them (cpu_backend.h).
  void quantize_kv_rows(Tensor&, int64_t) const {}
  void rope(Tensor& x, int64_t head_dim, const model::v4::RopeTable& table, const model::v4::Step& step, bool inverse);

  // mHC: mhc.cpp.
  Mix hc_pre(const model::v4::HyperConnectionWeights& w, const Tensor& streams, Tensor& collapsed,
             const model::ModelConfig& cfg);
  void hc_post(const Mix& mix, const Tensor& block_out, Tensor& streams);
  Tensor hyper_head(const model::v4::ModelWeights& w, const Tensor& streams, const std::vector<int64_t>& rows,
                    const model::ModelConfig& cfg);
  // The same with given head weights (an MTP layer's own hc_head_*).
  Tensor hyper_head(const std::vector<float>& fn, const std::vector<float>& base, const std::vector<float>& scale,
                    const Tensor& streams, const std::vector<int64_t>& rows, const model::ModelConfig& cfg);
  // out[r, k·d + j] = per_stream[r·hc + k, j] + shared[r, j]: the MTP layer's input streams (h_proj of each stream
  // plus e_proj of the token, added to every stream).
  Tensor join_streams(const Tensor& per_stream, const Tensor& shared, int64_t hc);

  // The compressor, the Lightning Indexer, attention: compressor.cpp, indexer.cpp, attention.cpp.
  void compress(const model::v4::CompressorWeights& w, const Tensor& kv, const Tensor& gate,
                const model::v4::Step& step, int64_t layer, model::v4::CompressorSlot slot,
                const model::v4::RopeTable& rope, double eps);
  Picks indexer_topk(const Tensor& q, const Tensor& head_weights, const model::v4::Step& step, int64_t layer,
                     const model::ModelConfig& cfg);
  Tensor sparse_attention(const Tensor& q, const Tensor& kv, const std::vector<float>& sinks,
                          model::v4::AttentionKeys keys, const Picks& picks, const model::v4::Step& step,
                          int64_t layer, const model::ModelConfig& cfg);
  void update_window(const Tensor& kv, const model::v4::Step& step, int64_t layer, int64_t window);

  // Router and experts: moe.cpp.
  Routing route(const Tensor& scores, const model::v4::MoeWeights& w, const std::vector<int32_t>& tokens,
                const model::ModelConfig& cfg);
  Tensor experts(const Tensor& x, const Routing& routing, const model::v4::MoeWeights& w,
                 const model::ModelConfig& cfg);
  // Per layer so far this step: the distinct routed experts experts() ran.
  const std::vector<int64_t>& routed_experts() const { return routed_experts_; }

 private:
  Tensor tensor(int64_t rows, int64_t cols) { return {scratch_.alloc<float>(rows * cols), rows, cols}; }
  template <typename T>
  T* upload(const std::vector<T>& host);
  // The products' operands and dispatch (operand_type, operand, changed, product): linear.cpp.
  // Activations [m, k] as a product's input: fp32 (x itself), bf16, or fp8 codes with per-row-and-128-column scales
  // [ceil(k/128)][m] (fp8.h).
  struct Operand {
    const void* data = nullptr;
    const float* scales = nullptr;
    GemmType type = GemmType::Fp32;
  };
  // The operand type a product with w at m rows takes: the weights' own for bf16 and fp32; for FP8 weights, fp8
  // when cuBLASLt's FP8 GEMM takes the shape and m is above GEMV size, else bf16 (weight-only FP8 GEMV, or the
  // dequantized fallback). n, k, ldx, ldw, ldy describe the product (a group of the grouped projection, say).
  GemmType operand_type(const DeviceMatrix& w, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldy);
  GemmType operand_type(const DeviceMatrix& w, int64_t m) {
    return operand_type(w, m, w.rows, w.cols, w.cols, w.cols, w.rows);
  }
  // x [m, k] as an operand of `type`, converted into scratch (or x itself for fp32). One layer feeds the same
  // activations to up to eight projections, so conversions are kept until x changes.
  Operand operand(const float* x, int64_t m, int64_t k, GemmType type);
  void changed(const float* x);  // every op that writes a tensor in place says so
  void* gemm_operand(int64_t count, GemmType type) {
    return scratch_.bytes(static_cast<size_t>(count) * gemm_type_size(type));
  }
  // y = x · wᵀ into fp32 y, dispatched on w's type (x: an operand of operand_type(w, m)).
  void product(const Operand& x, int64_t m, const DeviceMatrix& w, float* y);
  // The batch-invariant products: `groups` products at element strides (as grouped_linear's), through the GEMV
  // kernels kGemvMaxRows rows at a time; a shape they do not take is an error naming it, never another kernel.
  void invariant_product(const Operand& x, int64_t ldx, int64_t stride_x, int64_t m, const DeviceMatrix& w,
                         int64_t rows, int64_t k, int64_t stride_w, int64_t groups, float* y, int64_t ldy,
                         int64_t stride_y);
  // experts() in batch-invariant mode (moe.cpp).
  Tensor invariant_experts(const Tensor& x, const Routing& routing, const model::v4::MoeWeights& w,
                           const model::ModelConfig& cfg);
  // One SwiGLU expert. x: an operand of the expert's type, or fp32 rows (converted here as each product needs).
  void swiglu_expert(const model::v4::ExpertWeights& w, Operand x, int64_t m, float* y, double limit);
  const EntryTable& entry_table(int64_t layer, model::v4::CompressorSlot slot) const;
  // An op that needs the host inside the body (a sync, an upload): this step's shape is not recorded.
  void not_recordable(const char* why);

  const DeviceWeights& weights_;
  Gemm& gemm_;
  Scratch& scratch_;
  const model::StateLayout& layout_;
  const model::ModelConfig& cfg_;
  std::vector<const model::v4::RopeTable*> ropes_;  // cos/sin rows of each are uploaded in begin_step
  cudaStream_t stream_;
  OpClock* clock_;
  Scratch::Mark layer_mark_;

  // This step's layout on the device.
  StepLayout rows_;
  const int32_t* tokens_ = nullptr;
  float* const* state_ = nullptr;          // per chunk: its sequence's fixed-state block
  std::map<int64_t, std::pair<const int32_t*, int64_t>> work_;  // rate → (chunk, window) pairs closing this step
  std::map<int64_t, int64_t> closed_max_;                        // rate → most entries any chunk has after the step
  std::vector<EntryTable> tables_;                               // [layer · 2 + slot]
  std::map<const model::v4::RopeTable*, std::pair<float*, float*>> rope_rows_;  // cos, sin [rows, half]
  // (x, operand type) → ((m, k), its operand), this layer
  std::map<std::pair<const float*, GemmType>, std::pair<std::pair<int64_t, int64_t>, Operand>> converted_;
  // -1: counted on the device (routed_active_), read at end_step; -2: the same, the shared expert among them
  std::vector<int64_t> routed_experts_;
  int32_t* routed_active_ = nullptr;     // [layers] the grouped path's active-expert counts, this step
  HostStaging* staging_ = nullptr;       // pinned memory for what goes home (the runner's, kept between steps)
  HostStaging* upload_staging_ = nullptr;
  HostStaging* mask_staging_ = nullptr;
  const std::vector<int64_t>* wanted_ = nullptr;  // the step's logits rows (StepRows), and their device copy
  const int32_t* wanted_device_ = nullptr;
  const std::vector<int64_t>* kept_ = nullptr;  // the step's stream rows (Step::stream_rows), and their device copy
  const int32_t* kept_device_ = nullptr;
  const Mat* input_ = nullptr;            // the step's host input (Step::input), and its upload
  float* input_device_ = nullptr;
  StepGraphs* graphs_ = nullptr;
  StepGraphs::Entry* graph_ = nullptr;   // this decode step's shape, or null
  bool capturing_ = false;
  bool body_recordable_ = true;
  bool invariant_ = false;  // set_batch_invariant
};

}  // namespace strata::cuda
