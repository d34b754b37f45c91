// CudaBackend's mHC ops (paper §2.2): hc_pre, hc_post and the HyperHead (kernels: mhc.cuh).
#include "backend/cuda/cuda_backend_op.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/mhc.h"
#include "core/error.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

CudaBackend::Mix CudaBackend::hc_pre(const HyperConnectionWeights& w, const Tensor& streams, Tensor& collapsed,
                                     const ModelConfig& cfg) {
  STRATA_TIMED_OP("hc_pre");
  const int64_t hc = cfg.hc_mult, d = cfg.hidden_size;
  collapsed = tensor(streams.rows, d);
  Mix m{scratch_.alloc<float>(streams.rows * (hc + hc * hc)), hc};
  // Above decode sizes the mixes fn · streams are one fp32 GEMM (true fp32, as the slice kernel's sums); in
  // batch-invariant mode the slice kernel takes every row count (its sums do not depend on it, cuBLASLt's may).
  const int64_t n = (2 + hc) * hc;
  float* mixes = nullptr;
  if (streams.rows > kGemvMaxRows && !invariant_) {
    mixes = scratch_.alloc<float>(streams.rows * n);
    gemm_.run(GemmType::Fp32, streams.data, hc * d, weights_.vec(w.fn), hc * d, mixes, n, streams.rows, n, hc * d,
              stream_);
  }
  cuda::hc_pre(streams.data, weights_.vec(w.fn), weights_.vec(w.base), weights_.vec(w.scale), collapsed.data, m.data,
               streams.rows, hc, d, static_cast<float>(cfg.rms_norm_eps), static_cast<float>(cfg.hc_eps),
               cfg.hc_sinkhorn_iters, scratch_.alloc<float>(mix_partial_floats(streams.rows, n, hc * d)), stream_,
               mixes);
  return m;
}

void CudaBackend::hc_post(const Mix& mix, const Tensor& block_out, Tensor& streams) {
  STRATA_TIMED_OP("hc_post");
  changed(streams.data);
  cuda::hc_post(mix.data, block_out.data, streams.data, streams.rows, mix.hc, block_out.cols, stream_);
}

CudaBackend::Tensor CudaBackend::hyper_head(const ModelWeights& w, const Tensor& streams,
                                            const std::vector<int64_t>& rows, const ModelConfig& cfg) {
  return hyper_head(w.hc_head_fn, w.hc_head_base, w.hc_head_scale, streams, rows, cfg);
}

CudaBackend::Tensor CudaBackend::hyper_head(const std::vector<float>& fn, const std::vector<float>& base,
                                            const std::vector<float>& scale, const Tensor& streams,
                                            const std::vector<int64_t>& rows, const ModelConfig& cfg) {
  STRATA_TIMED_OP("hyper_head");
  const int64_t d = cfg.hidden_size;
  Tensor y = tensor(static_cast<int64_t>(rows.size()), d);
  // begin_step uploaded the rows a step asks for; another list (no caller today) goes up here, unrecorded.
  const int32_t* index = wanted_device_;
  if (rows != *wanted_) {
    not_recordable("hyper_head rows");
    index = upload(std::vector<int32_t>(rows.begin(), rows.end()));
  }
  cuda::hyper_head(streams.data, index, weights_.vec(fn), weights_.vec(base), weights_.vec(scale), y.data, y.rows,
                   cfg.hc_mult, d,
                   static_cast<float>(cfg.rms_norm_eps), static_cast<float>(cfg.hc_eps),
                   scratch_.alloc<float>(mix_partial_floats(y.rows, cfg.hc_mult, cfg.hc_mult * d)), stream_);
  return y;
}

CudaBackend::Tensor CudaBackend::join_streams(const Tensor& per_stream, const Tensor& shared, int64_t hc) {
  STRATA_TIMED_OP("join_streams");
  const int64_t d = shared.cols;
  if (per_stream.rows != shared.rows * hc || per_stream.cols != d)
    fail("join_streams: ", per_stream.rows, " × ", per_stream.cols, " stream rows for ", shared.rows, " × ", d,
         " shared rows and ", hc, " streams");
  Tensor out = tensor(shared.rows, hc * d);
  cuda::join_streams(per_stream.data, shared.data, out.data, shared.rows, hc, d, stream_);
  return out;
}

}  // namespace strata::cuda
