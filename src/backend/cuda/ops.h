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
void rope_interleaved(float* x, int64_t rows, int64_t heads, int64_t head_stride, int64_t offset, int64_t half,
                      const float* cos, const float* sin, bool inverse, cudaStream_t stream);

// Shared-KV attention with a per-head sink for `rows` queries of `heads` heads (dim `head_dim`): query r attends
// to the key vectors keys[r · max_keys + j] for j < key_count[r] (K = V; each a pointer to head_dim floats, so
// window rows, ring slots and compressed entries need no copying), with
//   p = softmax([q·k_j · scale, sink_h]) and out = Σ_j p_j · k_j  (the sink takes mass but adds no value).
void sparse_attention(const float* q, const float* const* keys, const int32_t* key_count, int64_t max_keys,
                      const float* sinks, float* out, int64_t rows, int64_t heads, int64_t head_dim, float scale,
                      cudaStream_t stream);

// The element type of matrix-product operands (weights and the activations fed to them): bf16 (the product) or
// fp32 (the reference precision: fp32 arithmetic throughout, no TF32).
enum class GemmType { Bf16, Fp32 };
inline size_t gemm_type_size(GemmType t) { return t == GemmType::Bf16 ? 2 : 4; }

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

 private:
  struct Plan;
  // m, n, k, ldx, ldw, ldy, stride_x, stride_w, stride_y, batch
  using Shape = std::array<int64_t, 10>;
  using PlanKey = std::tuple<int, Shape, uint32_t, uint32_t, uint32_t>;
  const Plan& plan(GemmType type, const Shape& shape, const void* x, const void* w, const float* y);
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device scratch for cuBLASLt's algorithms
  size_t workspace_bytes_ = 32u << 20;
};

}  // namespace strata::cuda
