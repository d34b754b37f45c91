// CudaBackend's attention: sparse_attention over each row's keys (key pointers: attention_keys.cuh; the attention
// kernels: attention.cu, attention_mma.cu) and update_window, the sliding-window ring after the step.
#include <cmath>

#include "backend/cuda/attention_keys.h"
#include "backend/cuda/cuda_backend_op.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

// Steps of at most this many query rows (decode) split each query's keys over blocks: few queries would leave the
// GPU idle, and the split's scratch (rows · heads · parts · head_dim) stays small. Larger steps have blocks enough.
constexpr int64_t kSplitKeysMaxRows = 256;

CudaBackend::Tensor CudaBackend::sparse_attention(const Tensor& q, const Tensor& kv, const std::vector<float>& sinks,
                                                  AttentionKeys keys_kind, const Picks& picks, const Step&,
                                                  int64_t layer, const ModelConfig& cfg) {
  STRATA_TIMED_OP("sparse_attention");
  const int64_t n = q.rows, heads = cfg.num_attention_heads, hd = cfg.head_dim, window = cfg.sliding_window;
  KeyEntries mode = KeyEntries::None;
  int64_t rate = 1, extra = 0;
  if (keys_kind == AttentionKeys::WindowAndPicked) {
    mode = KeyEntries::Picked;
    rate = cfg.csa_compress_rate;
    extra = picks.topk;
  } else if (keys_kind == AttentionKeys::WindowAndAllEntries) {
    mode = KeyEntries::All;
    rate = cfg.hca_compress_rate;
    extra = closed_max_.at(rate);
  }
  const int64_t max_keys = window + extra;
  const float** keys = scratch_.alloc<const float*>(n * max_keys);
  int32_t* key_count = scratch_.alloc<int32_t>(n);
  attention_keys(kv.data, state_, layout_.layers[static_cast<size_t>(layer)].swa, layout_.window_rows, window, hd, mode,
                 entry_table(layer, CompressorSlot::Attention), rate, picks.index, picks.count, picks.topk, rows_,
                 max_keys, keys, key_count, stream_);
  Tensor out = tensor(n, heads * hd);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool mma = weights_.type() != GemmType::Fp32 && attention_mma_supported(hd);
  if (invariant_ && mma) {
    // Batch-invariant: the tensor-core kernel for every row count — one block per query row walks that row's keys
    // in order, whatever the other rows (attention_mma.cu).
    sparse_attention_mma(q.data, keys, key_count, max_keys, weights_.vec(sinks), out.data, n, heads, hd, scale, stream_);
  } else if (invariant_) {
    // Batch-invariant, fp32 or a head width the tensor-core kernel does not take: the split kernel for every row
    // count (each part sums a fixed run of a row's keys, and the merge adds the parts in order), kSplitKeysMaxRows
    // rows at a time so its scratch stays a decode step's.
    float* split = scratch_.alloc<float>(attention_split_floats(std::min(n, kSplitKeysMaxRows), heads, hd, max_keys));
    for (int64_t r0 = 0; r0 < n; r0 += kSplitKeysMaxRows) {
      const int64_t rc = std::min(kSplitKeysMaxRows, n - r0);
      sparse_attention_split(q.data + r0 * q.cols, keys + r0 * max_keys, key_count + r0, max_keys, weights_.vec(sinks),
                             out.data + r0 * out.cols, rc, heads, hd, scale, split, stream_);
    }
  } else if (n > kSplitKeysMaxRows && mma)
    sparse_attention_mma(q.data, keys, key_count, max_keys, weights_.vec(sinks), out.data, n, heads, hd, scale, stream_);
  else if (n <= kSplitKeysMaxRows)
    sparse_attention_split(q.data, keys, key_count, max_keys, weights_.vec(sinks), out.data, n, heads, hd, scale,
                           scratch_.alloc<float>(attention_split_floats(n, heads, hd, max_keys)), stream_);
  else
    cuda::sparse_attention(q.data, keys, key_count, max_keys, weights_.vec(sinks), out.data, n, heads, hd, scale,
                           stream_);
  return out;
}

void CudaBackend::update_window(const Tensor& kv, const Step&, int64_t layer, int64_t) {
  STRATA_TIMED_OP("update_window");
  cuda::update_window(kv.data, state_, layout_.layers[static_cast<size_t>(layer)].swa, layout_.window_rows, kv.cols,
                      rows_, stream_);
}

}  // namespace strata::cuda
