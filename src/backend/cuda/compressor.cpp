// CudaBackend::compress: a compressor's windows that close this step become entries (kernels: compressor.cuh).
#include "backend/cuda/compressor.h"
#include "backend/cuda/cuda_backend_op.h"

namespace strata::cuda {

using model::ModelConfig;
using namespace model::v4;

void CudaBackend::compress(const CompressorWeights& w, const Tensor& kv, const Tensor& gate, const Step&,
                           int64_t layer, CompressorSlot slot, const RopeTable& rope, double eps) {
  STRATA_TIMED_OP("compress");
  const CompressorLayout& o = layout_.layers[static_cast<size_t>(layer)].of(slot == CompressorSlot::Indexer);
  CompressorStep c;
  c.kv = kv.data;
  c.gate = gate.data;
  c.ape = weights_.vec(w.ape);
  c.norm = weights_.vec(w.norm);
  c.state = state_;
  c.ring_kv = o.ring_kv;
  c.ring_gate = o.ring_gate;
  c.ring_rows = o.ring_rows;
  c.rate = w.rate;
  c.width = w.overlap ? 2 * w.dim : w.dim;
  c.dim = w.dim;
  c.overlap = w.overlap;
  c.inv_freq = weights_.vec(rope.inv_freq);
  c.rope_half = rope.half();
  c.rope_scaling = rope.attention_scaling;
  c.eps = static_cast<float>(eps);
  c.entries = entry_table(layer, slot);
  c.entries_out = const_cast<float*>(c.entries.arena);
  const auto& [work, n_work] = work_.at(w.rate);
  cuda::compress(c, rows_, work, n_work, stream_);
}

}  // namespace strata::cuda
