// bf16 or fp32 GEMM through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ. Row-major x and w are column-major xᵀ (k × m) and
// wᵀ (k × n), so cuBLAS computes yᵀ = (wᵀ)ᵀ · xᵀ with A = w transposed ("TN", the layout its FP8 paths need too).
#include <cublasLt.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
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
};


Gemm::Gemm() {
  cublasLtHandle_t h;
  STRATA_CUDA_CHECK(cublasLtCreate(&h));
  handle_ = h;
  STRATA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->op);
  }
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
