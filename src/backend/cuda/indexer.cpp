// CudaBackend::indexer_topk: the Lightning Indexer's scores and top-k (kernels: indexer.cuh).
#include <algorithm>

#include "backend/cuda/cuda_backend_op.h"
#include "backend/cuda/indexer.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

CudaBackend::Picks CudaBackend::indexer_topk(const Tensor& q, const Tensor& head_w, const Step&, int64_t layer,
                                             const ModelConfig& cfg) {
  STRATA_TIMED_OP("indexer_topk");
  const EntryTable& t = entry_table(layer, CompressorSlot::Indexer);
  const int64_t rate = cfg.csa_compress_rate;
  const int64_t max_visible = closed_max_.at(rate);
  Picks p{scratch_.alloc<int32_t>(q.rows * cfg.index_topk), scratch_.alloc<int32_t>(q.rows), cfg.index_topk};
  float* scores = scratch_.alloc<float>(std::max<int64_t>(1, q.rows * max_visible));
  cuda::indexer_topk(q.data, head_w.data, t, rows_, rate, cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk,
                     max_visible, scores, p.index, p.count, stream_);
  return p;
}

}  // namespace strata::cuda
