#pragma once
// The CUDA backend's operations (sm_90a). Each has a CPU counterpart in backend/cpu/ops.h or the model, and a test
// in tests/gpu/ that compares the two on fresh random inputs. Pointers are device pointers; launches go to `stream`.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace strata::cuda {

// y[rows, cols] = x · rsqrt(mean(x²) + eps) [· weight]; weight may be null. In place is allowed (y == x).
void rms_norm(const float* x, const float* weight, float* y, int64_t rows, int64_t cols, float eps, cudaStream_t stream);

// Interleaved RoPE on the slice [offset, offset + 2·half) of each of `heads` vectors of length `head_stride` in
// every row: pairs rotate by the row's angles cos/sin[row, half]. `inverse` rotates backwards.
// cos/sin [rows, half] for each row's position (as model::v4::RopeTable::cos_sin on the host).
void rope_cos_sin(const int32_t* position, int64_t rows, const float* inv_freq, int64_t half, float scaling,
                  float* cos, float* sin, cudaStream_t stream);
void rope_interleaved(float* x, int64_t rows, int64_t heads, int64_t head_stride, int64_t offset, int64_t half,
                      const float* cos, const float* sin, bool inverse, cudaStream_t stream);

// Shared-KV attention with a per-head sink for `rows` queries of `heads` heads (dim `head_dim`): query r attends
// to the key vectors keys[r · max_keys + j] for j < key_count[r] (K = V; each a pointer to head_dim floats, so
// window rows, ring slots and compressed entries need no copying), with
//   p = softmax([q·k_j · scale, sink_h]) and out = Σ_j p_j · k_j  (the sink takes mass but adds no value).
void sparse_attention(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                      const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                      cudaStream_t stream);

// The same on tensor cores (attention_mma.cu): q, keys and probabilities rounded to fp16, fp32 accumulation and
// softmax; for prefill-sized steps of the bf16 and fp8 precisions. head_dim one of attention_mma_supported's.
bool attention_mma_supported(int64_t head_dim);
void sparse_attention_mma(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                          const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                          cudaStream_t stream);

// The element type of matrix-product operands (weights and the activations fed to them): bf16 (the product), fp32
// (the reference precision: fp32 arithmetic throughout, no TF32), or fp8 — e4m3 codes with fp32 scales, for weights
// per 128×128 block (a DeepSeek checkpoint's own layout, uploaded as stored) and for activations per row and 128
// columns (quantize_fp8_rows, fp8.h).
enum class GemmType { Bf16, Fp32, Fp8 };
inline size_t gemm_type_size(GemmType t) { return t == GemmType::Fp8 ? 1 : t == GemmType::Bf16 ? 2 : 4; }
inline const char* gemm_type_name(GemmType t) { return t == GemmType::Fp8 ? "fp8" : t == GemmType::Bf16 ? "bf16" : "fp32"; }

// The same for decode-sized steps, keys split over blocks and merged (no difference beyond rounding); `scratch`
// holds attention_split_floats(rows, heads, head_dim, max_keys) floats.
int64_t attention_split_floats(int64_t rows, int64_t heads, int64_t head_dim, int64_t max_keys);
void sparse_attention_split(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                            const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                            float* scratch, cudaStream_t stream);

// y[m, n] = Σ_k x[m, k] · w[n, k] with fp32 accumulation and output (cuBLASLt, TN layout).
class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  void bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t m, int64_t n, int64_t k,
            cudaStream_t stream) {
    run(GemmType::Bf16, x, k, w, k, y, n, m, n, k, stream);
  }
  // x and w of element type `type`, with row strides (elements) for x, w and y: column blocks of larger row-major
  // matrices too.
  void run(GemmType type, const void* x, int64_t ldx, const void* w, int64_t ldw, float* y, int64_t ldy, int64_t m,
           int64_t n, int64_t k, cudaStream_t stream) {
    run_batched(type, x, ldx, 0, w, ldw, 0, y, ldy, 0, m, n, k, 1, stream);
  }
  // `batch` such products in one launch, the b-th on x + b·stride_x, w + b·stride_w, y + b·stride_y (elements).
  void run_batched(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw,
                   int64_t stride_w, float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k,
                   int64_t batch, cudaStream_t stream);

  // DeepSeek-style FP8: x e4m3 [m, k] (row stride ldx) with fp32 scales xs [k/128][mp] (token index fastest, as
  // quantize_fp8_rows writes them; both padded to mp = fp8_padded_rows(m) rows), w e4m3 [n, k] (row stride ldw)
  // with 128×128 block scales ws [n/128][k/128] row-major; y fp32 [m, n] (row stride ldy) = Σ (x·xs)(w·ws).
  // cuBLASLt's BLK128x128_32F / VEC128_32F scale modes (../shared/probes); the padded rows' outputs go to a
  // staging buffer, not to y. Every pointer 16-byte aligned. fp8_supported says whether cuBLASLt has an algorithm
  // for the shape (k and n whole blocks; planned once and cached); callers take another path where it has none.
  bool fp8_supported(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldy);
  void fp8(const void* x, int64_t ldx, const float* xs, const void* w, int64_t ldw, const float* ws, float* y,
           int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream);
  // How the FP8 plan of this shape writes its output: fp32 directly, or bf16 then widened (when cuBLASLt offers no
  // fp32 output); "none" where fp8_supported is false. For the op checks' report.
  const char* fp8_output(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldy);

 private:
  struct Plan;
  // m, n, k, ldx, ldw, ldy, stride_x, stride_w, stride_y, batch
  using Shape = std::array<int64_t, 10>;
  using PlanKey = std::tuple<int, Shape, uint32_t, uint32_t, uint32_t>;
  const Plan& plan(GemmType type, const Shape& shape, const void* x, const void* w, const float* y);
  // The plan of an FP8 product of m rows (a multiple of 16) whose output has row stride ldd.
  const Plan& fp8_plan(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldd);
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device scratch for cuBLASLt's algorithms
  size_t workspace_bytes_ = 32u << 20;
  void* staging_ = nullptr;  // FP8 outputs with padding rows, or in bf16 (no fp32 output), before they go to y
  size_t staging_bytes_ = 0;
};

}  // namespace strata::cuda
