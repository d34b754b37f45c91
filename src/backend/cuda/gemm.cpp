// bf16 GEMM through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ. Row-major x and w are column-major xᵀ (k × m) and
// wᵀ (k × n), so cuBLAS computes yᵀ = (wᵀ)ᵀ · xᵀ with A = w transposed ("TN", the layout its FP8 paths need too).
#include <cublasLt.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/ops.h"

namespace strata::cuda {

Gemm::Gemm() {
  cublasLtHandle_t h;
  STRATA_CUDA_CHECK(cublasLtCreate(&h));
  handle_ = h;
  STRATA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

void Gemm::bf16_strided(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t ldw, float* y,
                        int64_t ldy, int64_t m, int64_t n, int64_t k, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  cublasLtMatmulDesc_t op;
  STRATA_CUDA_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  cublasLtMatrixLayout_t a, b, c;
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), ldw));
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(m), ldx));
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, static_cast<uint64_t>(n), static_cast<uint64_t>(m), ldy));
  cublasLtMatmulPreference_t pref;
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes_, sizeof(workspace_bytes_)));
  // Column blocks of larger matrices start at any element: tell the heuristic how aligned each pointer really is.
  auto alignment = [](const void* p) {
    const auto address = reinterpret_cast<uintptr_t>(p);
    uint32_t bytes = 256;
    while (bytes > 1 && address % bytes != 0) bytes /= 2;
    return bytes;
  };
  const uint32_t align_w = alignment(w), align_x = alignment(x), align_y = alignment(y);
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
  const auto h = static_cast<cublasLtHandle_t>(handle_);
  STRATA_CUDA_CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, a, b, c, c, pref, 1, &heuristic, &found));
  if (found == 0) fail("cuBLASLt has no bf16 algorithm for m=", m, " n=", n, " k=", k);
  const float alpha = 1.0f, beta = 0.0f;
  STRATA_CUDA_CHECK(cublasLtMatmul(h, op, &alpha, w, a, x, b, &beta, y, c, y, c, &heuristic.algo, workspace_,
                                   workspace_bytes_, stream));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(op);
}

}  // namespace strata::cuda
