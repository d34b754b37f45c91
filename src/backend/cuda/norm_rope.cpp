// CudaBackend's RMSNorm and RoPE ops (kernels: norm_rope.cu; each step's cos/sin rows: begin_recording,
// cuda_backend.cpp).
#include "backend/cuda/cuda_backend_op.h"
#include "core/error.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

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

}  // namespace strata::cuda
