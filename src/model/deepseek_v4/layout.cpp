#include "model/deepseek_v4/layout.h"

#include <numeric>

#include "core/error.h"

namespace strata::model::v4 {

StateLayout make_state_layout(const ModelConfig& cfg, const ModelWeights& weights, int64_t max_rollback) {
  if (max_rollback < 1) fail("state layout: max_rollback must be ≥ 1, got ", max_rollback);
  StateLayout s;
  s.window = cfg.sliding_window;
  s.head_dim = cfg.head_dim;
  s.max_rollback = max_rollback;
  s.window_rows = cfg.sliding_window + max_rollback - 1;
  auto compressors_of = [](const LayerWeights& l) {
    return std::pair{l.attn.compressor ? &*l.attn.compressor : nullptr,
                     l.attn.indexer ? &l.attn.indexer->compressor : nullptr};
  };
  for (const LayerWeights& l : weights.layers)
    for (const CompressorWeights* c : {compressors_of(l).first, compressors_of(l).second})
      if (c) {
        if (c->rate < 1 || c->dim < 1) fail("state layout: a compressor of rate ", c->rate, " and width ", c->dim);
        s.block_tokens = std::lcm(s.block_tokens, c->rate);
        s.smallest_rate = s.smallest_rate ? std::min(s.smallest_rate, c->rate) : c->rate;
      }
  if (s.block_tokens > 1 << 16) fail("state layout: the compression rates' common multiple ", s.block_tokens, " is too large for a token block");
  int64_t at = 0;
  for (const LayerWeights& l : weights.layers) {
    LayerLayout ll;
    ll.swa = at;
    at += s.window_rows * s.head_dim;
    auto place = [&](const CompressorWeights* w, CompressorLayout& c) {
      if (!w) return;
      c.rate = w->rate;
      c.dim = w->dim;
      c.overlap = w->overlap;
      c.width = w->overlap ? 2 * w->dim : w->dim;
      // The rows between first_needed and the last position, plus those a rollback may drop again.
      c.ring_rows = (w->overlap ? 2 : 1) * w->rate + max_rollback - 1;
      c.ring_kv = at;
      at += c.ring_rows * c.width;
      c.ring_gate = at;
      at += c.ring_rows * c.width;
      c.per_block = s.block_tokens / w->rate;
      c.block_offset = s.block_floats;
      s.block_floats += c.per_block * c.dim;
    };
    place(compressors_of(l).first, ll.compressor);
    place(compressors_of(l).second, ll.indexer);
    s.layers.push_back(ll);
  }
  // Each MTP layer attends over its own sliding window only (docs/mtp.md): one more ring, after the layers'.
  for (size_t i = 0; i < weights.mtp.size(); ++i) {
    LayerLayout ll;
    ll.swa = at;
    at += s.window_rows * s.head_dim;
    s.mtp_layers.push_back(ll);
  }
  s.fixed_floats = at;
  return s;
}

StateLayout mtp_view_layout(const StateLayout& layout, int64_t mtp_layer) {
  if (mtp_layer < 0 || mtp_layer >= static_cast<int64_t>(layout.mtp_layers.size()))
    fail("MTP: no MTP layer ", mtp_layer, " (the model has ", layout.mtp_layers.size(), ")");
  StateLayout v;
  v.window = layout.window;
  v.head_dim = layout.head_dim;
  v.max_rollback = layout.max_rollback;
  v.window_rows = layout.window_rows;
  v.layers = {layout.mtp_layers[static_cast<size_t>(mtp_layer)]};
  return v;
}

}  // namespace strata::model::v4
