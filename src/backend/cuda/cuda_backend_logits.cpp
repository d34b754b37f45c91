// CudaBackend's end of a step: which logits come home, and how (see logits_out.h).
#include <algorithm>
#include <cstring>
#include <span>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling.h"
#include "core/error.h"
#include "engine/sampler.h"

namespace strata::cuda {

Mat CudaBackend::rows_to_host(const Tensor& x, const std::vector<int64_t>& rows) {
  const OpClock::Scope timed_op_(clock_, "rows_to_host", rows_.rows, stream_);
  Mat m(static_cast<int64_t>(rows.size()), x.cols);
  if (rows.empty()) return m;
  const size_t row_bytes = static_cast<size_t>(x.cols) * sizeof(float);
  char* dst = staging_ ? static_cast<char*>(staging_->bytes(row_bytes * rows.size()))
                       : reinterpret_cast<char*>(m.v.data());
  // One copy per run of consecutive rows: usually the whole list is one run.
  for (size_t i = 0; i < rows.size();) {
    size_t end = i + 1;
    while (end < rows.size() && rows[end] == rows[end - 1] + 1) ++end;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst + i * row_bytes, x.data + rows[i] * x.cols, (end - i) * row_bytes,
                                      cudaMemcpyDeviceToHost, stream_));
    i = end;
  }
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (staging_) std::memcpy(m.v.data(), dst, row_bytes * rows.size());
  return m;
}

std::vector<int32_t> CudaBackend::argmax_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  const OpClock::Scope timed_op_(clock_, "argmax_rows", rows_.rows, stream_);
  std::vector<int32_t> out(rows.size());
  if (rows.empty()) return out;
  const std::vector<int32_t> rows32(rows.begin(), rows.end());
  int32_t* d_rows = scratch_.alloc<int32_t>(static_cast<int64_t>(rows.size()) * 2);
  int32_t* d_out = d_rows + rows.size();
  // From pageable memory the copy is staged before the call returns, so rows32 may go out of scope after it.
  STRATA_CUDA_CHECK(cudaMemcpyAsync(d_rows, rows32.data(), rows32.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                    stream_));
  cuda::argmax_rows(x.data, x.cols, d_rows, static_cast<int64_t>(rows.size()), d_out, stream_);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

std::vector<int32_t> CudaBackend::sample_rows(const Tensor& x, const std::vector<int64_t>& rows,
                                              const std::vector<model::v4::PickParams>& picks) {
  const OpClock::Scope timed_op_(clock_, "sample_rows", rows_.rows, stream_);
  std::vector<int32_t> out(rows.size());
  if (rows.empty()) return out;
  // Masses are summed as 64-bit multiples of 2^-46 of the top token's probability (sampling.cu).
  if (x.cols >= (int64_t{1} << 17)) fail("sample_rows: a vocabulary of ", x.cols, " tokens; the device sampler takes < 131072");
  std::vector<RowPick> host(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const model::v4::PickParams& p = picks[i];
    host[i].inv_temperature = 1.0 / p.temperature;
    host[i].top_p = p.top_p;
    host[i].min_p = p.min_p;
    host[i].uniform = p.uniform;
    host[i].top_k = static_cast<int32_t>(std::min<int64_t>(p.top_k, x.cols));
    host[i].row = static_cast<int32_t>(rows[i]);
  }
  auto* d_picks = static_cast<RowPick*>(scratch_.bytes(host.size() * (sizeof(RowPick) + sizeof(int32_t))));
  auto* d_out = reinterpret_cast<int32_t*>(d_picks + host.size());
  // From pageable memory the copy is staged before the call returns, so `host` may go out of scope after it.
  STRATA_CUDA_CHECK(cudaMemcpyAsync(d_picks, host.data(), host.size() * sizeof(RowPick), cudaMemcpyHostToDevice, stream_));
  cuda::sample_rows(x.data, x.cols, d_picks, static_cast<int64_t>(rows.size()), d_out, stream_);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Rows the kernel leaves to the host (no finite logit, or thousands of near-equal logits at a cut): the row home.
  for (size_t i = 0; i < rows.size(); ++i) {
    if (out[i] != kPickOnHost) continue;
    std::vector<float> row(static_cast<size_t>(x.cols));
    STRATA_CUDA_CHECK(cudaMemcpy(row.data(), x.data + rows[i] * x.cols, row.size() * sizeof(float), cudaMemcpyDeviceToHost));
    out[i] = engine::pick_token(row, picks[i]);
  }
  return out;
}

}  // namespace strata::cuda
