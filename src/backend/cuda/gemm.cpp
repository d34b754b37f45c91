// bf16 or fp32 GEMM through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ. Row-major x and w are column-major xᵀ (k × m) and
// wᵀ (k × n), so cuBLAS computes yᵀ = (wᵀ)ᵀ · xᵀ with A = w transposed ("TN", the layout its FP8 paths need too).
#include <cublasLt.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

namespace {

// How aligned a pointer really is (column blocks of larger matrices start at any element).
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t bytes = 256;
  while (bytes > 1 && address % bytes != 0) bytes /= 2;
  return bytes;
}

}  // namespace

// One shape's descriptors and algorithm: the heuristic query costs tens of microseconds, more than a decode-sized
// product itself, so each distinct (type, shape, strides, alignments) is planned once and reused.
struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool supported = true;   // FP8 plans: cuBLASLt had an algorithm
  bool bf16_out = false;   // FP8 plans: D is bf16 (staged, then widened into y)
};


Gemm::Gemm() {
  cublasLtHandle_t h;
  STRATA_CUDA_CHECK(cublasLtCreate(&h));
  handle_ = h;
  STRATA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
  }
  if (staging_) cudaFree(staging_);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

const Gemm::Plan& Gemm::plan(GemmType type, const Shape& shape, const void* x, const void* w, const float* y) {
  const uint32_t align_w = alignment(w), align_x = alignment(x), align_y = alignment(y);
  const PlanKey key{static_cast<int>(type), shape, align_w, align_x, align_y};
  if (const auto it = plans_.find(key); it != plans_.end()) return *it->second;
  const auto [m, n, k, ldx, ldw, ldy, stride_x, stride_w, stride_y, batch] = shape;

  auto p = std::make_unique<Plan>();
  STRATA_CUDA_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  // CUBLAS_COMPUTE_32F on fp32 operands is true fp32 arithmetic (TF32 only with the _FAST_TF32 compute type).
  const cudaDataType_t in = type == GemmType::Bf16 ? CUDA_R_16BF : CUDA_R_32F;
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->a, in, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldw));
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->b, in, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ldx));
  STRATA_CUDA_CHECK(
      cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldy));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    for (auto [layout, stride] : {std::pair{p->a, stride_w}, std::pair{p->b, stride_x}, std::pair{p->c, stride_y}}) {
      STRATA_CUDA_CHECK(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      STRATA_CUDA_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                         sizeof(stride)));
    }
  }
  cublasLtMatmulPreference_t pref;
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes_, sizeof(workspace_bytes_)));
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_w,
                                                         sizeof(align_w)));
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_x,
                                                         sizeof(align_x)));
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_y,
                                                         sizeof(align_y)));
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_y,
                                                         sizeof(align_y)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  STRATA_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->c,
                                                   p->c, pref, 1, &heuristic, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0)
    fail("cuBLASLt has no ", type == GemmType::Bf16 ? "bf16" : "fp32", " algorithm for m=", m, " n=", n, " k=", k,
         " batch=", batch);
  p->algo = heuristic.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

namespace {

// A matmul descriptor of the FP8 scale modes with these scale pointers (weights ws, activations xs).
cublasLtMatmulDesc_t fp8_descriptor(const float* ws, const float* xs) {
  cublasLtMatmulDesc_t op = nullptr;
  STRATA_CUDA_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  const cublasLtMatmulMatrixScale_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof(ws)));
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof(xs)));
  return op;
}

}  // namespace

// FP8 plans are keyed by shape alone: Gemm::fp8 demands 16-byte alignment of every operand, which is what the plan
// tells the heuristic. The output is fp32 where cuBLASLt offers it for block-scaled FP8, else bf16 (the probe's
// case) widened afterwards; which one is decided here, once per shape, from the heuristic's answer.
const Gemm::Plan& Gemm::fp8_plan(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldy) {
  const PlanKey key{static_cast<int>(GemmType::Fp8), Shape{m, n, k, ldx, ldw, ldy, 0, 0, 0, 1}, 16, 16, 16};
  // (m is a padded row count here, and ldy the row stride of whatever the plan writes: y, or the staging buffer.)
  if (const auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto p = std::make_unique<Plan>();
  // Block scales cover whole 128-blocks of k (and of the weights' rows): partial blocks go the fallback path. And
  // k a multiple of 512: on the H200 (cuBLASLt 13.1, 2026-11-29) the heuristic offered an algorithm for k = 256
  // whose results were garbage (rel. error 15–190), while k = 512, 1024 and 4096 matched the reference to 1.3e-4.
  p->supported = m > 0 && k % (4 * kFp8Block) == 0 && n % kFp8Block == 0 && ldx % 16 == 0 && ldw % 16 == 0 &&
                 ldy % 4 == 0;
  for (const bool bf16_out : {false, true}) {
    if (!p->supported) break;
    // The scale pointers change per call (fp8() makes that call's descriptor); the heuristic is given placeholders.
    const auto* placeholder = static_cast<const float*>(workspace_);
    p->op = fp8_descriptor(placeholder, placeholder);
    STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldw));
    STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ldx));
    STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->c, bf16_out ? CUDA_R_16BF : CUDA_R_32F, static_cast<uint64_t>(n),
                                                 static_cast<uint64_t>(m), bf16_out ? n : ldy));
    cublasLtMatmulPreference_t pref;
    STRATA_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes_, sizeof(workspace_bytes_)));
    const uint32_t align = 16;
    for (const auto attribute : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attribute, &align, sizeof(align)));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    // Not checked: "not supported" is an answer here, not an error.
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a,
                                                                  p->b, p->c, p->c, pref, 1, &heuristic, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
      p->algo = heuristic.algo;
      p->bf16_out = bf16_out;
      return *plans_.emplace(key, std::move(p)).first->second;
    }
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->op);
    p->a = p->b = p->c = nullptr;
    p->op = nullptr;
  }
  p->supported = false;
  return *plans_.emplace(key, std::move(p)).first->second;
}

// Where the output of an m-row product goes first: y itself (row stride ldy) when there are no padding rows and
// cuBLASLt writes fp32, else the staging buffer (row stride n).
bool Gemm::fp8_supported(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldy) {
  const int64_t mp = fp8_padded_rows(m);
  const Plan& direct = fp8_plan(mp, n, k, ldx, ldw, mp == m ? ldy : n);
  return direct.supported;
}

const char* Gemm::fp8_output(int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldw, int64_t ldy) {
  const int64_t mp = fp8_padded_rows(m);
  const Plan& p = fp8_plan(mp, n, k, ldx, ldw, mp == m ? ldy : n);
  return !p.supported ? "none" : p.bf16_out ? "bf16" : "fp32";
}

void Gemm::fp8(const void* x, int64_t ldx, const float* xs, const void* w, int64_t ldw, const float* ws, float* y,
               int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  for (const void* p : {x, static_cast<const void*>(xs), w, static_cast<const void*>(ws), static_cast<const void*>(y)})
    if (alignment(p) < 16) fail("FP8 GEMM: an operand is not 16-byte aligned");
  const int64_t mp = fp8_padded_rows(m);
  const Plan& p = fp8_plan(mp, n, k, ldx, ldw, mp == m ? ldy : n);
  if (!p.supported) fail("FP8 GEMM: cuBLASLt has no algorithm for m=", m, " n=", n, " k=", k);
  // A descriptor of this call's own carries its scale pointers (the plan's keeps the heuristic's placeholders).
  cublasLtMatmulDesc_t op = fp8_descriptor(ws, xs);
  const bool staged = p.bf16_out || mp != m;
  void* d = y;
  if (staged) {
    const size_t bytes = static_cast<size_t>(mp * n) * (p.bf16_out ? sizeof(__nv_bfloat16) : sizeof(float));
    if (bytes > staging_bytes_) {
      if (staging_) STRATA_CUDA_CHECK(cudaFree(staging_));  // synchronises: no pending product still uses it
      STRATA_CUDA_CHECK(cudaMalloc(&staging_, bytes));
      staging_bytes_ = bytes;
    }
    d = staging_;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status = cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), op, &alpha, w, p.a, x, p.b,
                                               &beta, d, p.c, d, p.c, &p.algo, workspace_, workspace_bytes_, stream);
  cublasLtMatmulDescDestroy(op);
  STRATA_CUDA_CHECK(status);
  if (p.bf16_out)
    widen_bf16_rows(static_cast<const __nv_bfloat16*>(staging_), m, n, y, ldy, stream);
  else if (staged)
    STRATA_CUDA_CHECK(cudaMemcpy2DAsync(y, static_cast<size_t>(ldy) * sizeof(float), staging_,
                                        static_cast<size_t>(n) * sizeof(float), static_cast<size_t>(n) * sizeof(float),
                                        static_cast<size_t>(m), cudaMemcpyDeviceToDevice, stream));
}

void Gemm::run_batched(GemmType type, const void* x, int64_t ldx, int64_t stride_x, const void* w, int64_t ldw,
                       int64_t stride_w, float* y, int64_t ldy, int64_t stride_y, int64_t m, int64_t n, int64_t k,
                       int64_t batch, cudaStream_t stream) {
  if (m == 0 || n == 0 || batch == 0) return;
  const Plan& p = plan(type, {m, n, k, ldx, ldw, ldy, stride_x, stride_w, stride_y, batch}, x, w, y);
  const float alpha = 1.0f, beta = 0.0f;
  STRATA_CUDA_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, w, p.a, x, p.b, &beta, y,
                                   p.c, y, p.c, &p.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace strata::cuda
