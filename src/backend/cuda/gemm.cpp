// bf16 GEMM through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ. Row-major x and w are column-major xᵀ (k × m) and
// wᵀ (k × n), so cuBLAS computes yᵀ = (wᵀ)ᵀ · xᵀ with A = w transposed ("TN", the layout its FP8 paths need too).
#include <cublasLt.h>

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

void Gemm::bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int64_t m, int64_t n, int64_t k,
                cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  cublasLtMatmulDesc_t op;
  STRATA_CUDA_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  STRATA_CUDA_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof(keep)));
  cublasLtMatrixLayout_t a, b, c;
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
  STRATA_CUDA_CHECK(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n));
  cublasLtMatmulPreference_t pref;
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  STRATA_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes_, sizeof(workspace_bytes_)));
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
