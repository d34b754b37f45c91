#pragma once
// The DeepSeek-V4 forward pass, written once against backend ops (DESIGN.md "One forward, two backends"). Each
// function maps to a section of the paper: mHC (§2.2), CSA/HCA attention with the Lightning Indexer (§2.3), hash
// and top-k MoE (§2.1). A backend B provides:
//   B::Tensor  fp32 activations [rows, cols] on its device;  B::Mix  one hyper-connection site's mixing weights;
//   B::Picks   the indexer's top-k entries per row;         B::Routing  each row's experts and weights;
// and the ops called below. backend/cpu/cpu_backend.h is the readable reference of every op's meaning; the CUDA
// backend is tested against it op by op and as a whole.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"
#include "model/logits_stage.h"

namespace strata::model::v4 {

using model::DraftChunk;
using model::DraftOutput;

// Rows of a step, checked: every chunk has tokens and a state of this model (`layers` layers in its layout; -1: the
// config's num_hidden_layers), no state twice, ids in the vocabulary.
StepRows make_step_rows(const ModelConfig& cfg, const std::vector<SequenceChunk>& chunks, int64_t layers = -1);
// A sampling stage for a step of `logits_rows` logits rows, checked: rows in range and increasing, picks and
// penalties well-formed (a draw in [0, 1), a temperature ≥ 0, ids in the vocabulary).
void check_stage(const LogitsStage& stage, int64_t logits_rows, int64_t vocab);
// Every logits row of a step raw home, without picks: what a caller that wants the logits themselves asks for.
LogitsStage all_rows_home(int64_t logits_rows);

template <class B>
class Forward {
 public:
  using Tensor = typename B::Tensor;

  Forward(const ModelConfig& cfg, const ModelWeights& w, const RopeTable& rope_main, const RopeTable& rope_compress,
          B& backend)
      : cfg_(cfg), w_(w), rope_main_(rope_main), rope_compress_(rope_compress), b_(backend) {}

  // The forward of `chunks`, ending at the logits of their logits rows (StepRows::logits_rows) where the backend
  // computes; then the step's sampling stage on those rows (model/logits_stage.h): raw rows home, penalties, picks.
  StepLogits run(std::vector<SequenceChunk>& chunks, const LogitsStage& stage, const LayerObserver& observe) {
    if (chunks.empty()) return {};
    Step step{make_step_rows(cfg_, chunks), &chunks, stage.stream_rows};
    check_stage(stage, static_cast<int64_t>(step.rows.logits_rows.size()), cfg_.vocab_size);
    for (int64_t r : stage.stream_rows)
      if (r < 0 || r >= step.rows.rows())
        fail("sampling stage: stream row ", r, " is outside the step's ", step.rows.rows(), " rows");
    // The token blocks this step's entries go to (a pool's scheduler reserved them; a lone state's pool grows).
    for (SequenceChunk& ch : chunks)
      if (!ch.state->ensure_blocks(static_cast<int64_t>(ch.tokens.size())))
        fail("token blocks exhausted: the scheduler must reserve blocks before running a step");
    b_.begin_step(step);
    // A backend that recorded a step of this shape before runs the recording instead of the body (CUDA graphs of
    // decode steps); otherwise the body runs, and the backend may record it. The recording covers the kept streams
    // too (the stream rows are part of a step's shape), so a replayed step gives them as the body would.
    Tensor logits;
    Tensor kept;  // step.stream_rows' last-layer streams, where the backend computes (the MTP layer drafts from them)
    if (!b_.replay_step(logits, kept)) {
      b_.begin_recording(static_cast<bool>(observe));
      const int64_t hc = cfg_.hc_mult;
      // Every residual stream starts as the token embedding.
      Tensor streams = b_.embed(w_.embed, step.rows.tokens, hc);
      for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        b_.begin_layer();  // a layer's temporaries live until end_layer; the streams carry everything onward
        layer(w_.layers[static_cast<size_t>(l)], cfg_.layer_types[static_cast<size_t>(l)], l, streams, step);
        b_.end_layer();
        if (observe) observe(l, b_.to_host(streams));
      }

      if (!step.stream_rows.empty()) kept = b_.keep_rows(streams, step.stream_rows);
      // HyperHead: a last learned collapse of the streams, then the final norm and the vocabulary head — only for
      // the rows whose logits were asked for.
      Tensor y = b_.hyper_head(w_, streams, step.rows.logits_rows, cfg_);
      b_.rms_norm_rows(y, &w_.norm, cfg_.rms_norm_eps);
      logits = b_.linear(y, w_.head);
      b_.end_recording(logits, kept);
    }
    for (SequenceChunk& ch : chunks) {
      SequenceState& st = *ch.state;
      st.num_tokens += static_cast<int64_t>(ch.tokens.size());
      if (st.entries_kept_until && !st.replaying()) st.window_floor = st.entries_kept_until = 0;  // replay done
    }
    return sampling_stage(logits, stage, step, step.stream_rows.empty() ? nullptr : &kept);
  }

  // MTP draft step through MTP layer `i` (docs/mtp.md; DeepSeek's MTPBlock): each row joins the hidden streams of
  // its position with the embedding of the next token, e_proj(enorm(embed(token))) added to h_proj(hnorm(stream))
  // of each stream; then an ordinary layer (sliding-window attention, top-k MoE) over the MTP layer's own window;
  // then its own HyperHead and norm, and the shared vocabulary head. `view`: mtp_view_layout(layout, i).
  DraftOutput draft(std::vector<DraftChunk>& chunks, int64_t i, const StateLayout& view, const LogitsStage& stage) {
    if (chunks.empty()) return {};
    const MtpWeights& m = w_.mtp.at(static_cast<size_t>(i));
    const int64_t hc = cfg_.hc_mult, d = cfg_.hidden_size;
    // Each state seen through the MTP layer's layout, standing at its MTP position: the layer ops then read and
    // write the MTP ring as they would a layer's.
    std::vector<SequenceState> views(chunks.size());
    std::vector<SequenceChunk> as_chunks;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const DraftChunk& ch = chunks[c];
      if (!ch.state || static_cast<int64_t>(ch.state->mtp_tokens.size()) <= i)
        fail("MTP draft: sequence ", c, " of the batch has no state for MTP layer ", i);
      if (ch.streams.rows != static_cast<int64_t>(ch.tokens.size()) || ch.streams.cols != hc * d)
        fail("MTP draft: sequence ", c, " gives ", ch.streams.rows, " × ", ch.streams.cols, " hidden streams for ",
             ch.tokens.size(), " tokens (expected ", ch.tokens.size(), " × ", hc * d, ")");
      views[c].layout = &view;
      views[c].fixed = ch.state->fixed;
      views[c].num_tokens = ch.state->mtp_tokens[static_cast<size_t>(i)];
      as_chunks.push_back({ch.tokens, &views[c], ch.all_logits});
    }
    Step step{make_step_rows(cfg_, as_chunks, 1), &as_chunks};
    // A chunk's logits row other than its last (DraftChunk::logits_row): the rows after it are spare.
    for (size_t c = 0, at = 0; c < chunks.size(); ++c) {
      const DraftChunk& ch = chunks[c];
      const int64_t count = step.rows.count[c];
      if (ch.all_logits) {
        at += static_cast<size_t>(count);
        continue;
      }
      if (ch.logits_row >= count || ch.logits_row < -1)
        fail("MTP draft: sequence ", c, " asks for the logits of row ", ch.logits_row, " of its ", count, " rows");
      if (ch.logits_row >= 0) step.rows.logits_rows[at] = step.rows.first[c] + ch.logits_row;
      ++at;
    }
    // The layer's output streams of the logits rows are kept like a main step's stream rows, so that a recorded
    // draft (CUDA graphs) gives them as the body does.
    step.stream_rows = step.rows.logits_rows;
    // A reduced draft vocabulary (draft_vocabulary.h): the logits' columns are its ids.
    const WeightRef& head = w_.draft_head.data ? w_.draft_head : w_.head;
    check_stage(stage, static_cast<int64_t>(step.rows.logits_rows.size()), head.rows);
    if (!stage.stream_rows.empty())
      fail("MTP draft: the sampling stage asks for ", stage.stream_rows.size(),
           " stream rows; a draft step's output streams are DraftOutput::streams (its logits rows')");
    // The streams of every row, one stream per row ([rows·hc, d]: the same floats as [rows, hc·d]): the step's
    // input, which begin_step uploads with the rows (a GPU then records the draft like a decode step).
    Mat host(step.rows.rows() * hc, d);
    for (size_t c = 0; c < chunks.size(); ++c)
      std::copy(chunks[c].streams.v.begin(), chunks[c].streams.v.end(),
                host.row(step.rows.first[static_cast<int64_t>(c)] * hc));
    step.input = &host;
    b_.begin_step(step);
    Tensor logits;
    Tensor kept;
    if (!b_.replay_step(logits, kept)) {
      b_.begin_recording(false);
      Tensor h = b_.from_host(host);
      b_.rms_norm_rows(h, &m.hnorm, cfg_.rms_norm_eps);
      Tensor e = b_.embed(w_.embed, step.rows.tokens, 1);
      b_.rms_norm_rows(e, &m.enorm, cfg_.rms_norm_eps);
      Tensor streams = b_.join_streams(b_.linear(h, m.h_proj), b_.linear(e, m.e_proj), hc);
      b_.begin_layer();
      layer(m.block, AttentionType::Sliding, 0, streams, step);
      b_.end_layer();
      kept = b_.keep_rows(streams, step.stream_rows);
      Tensor y = b_.hyper_head(m.hc_head_fn, m.hc_head_base, m.hc_head_scale, streams, step.rows.logits_rows, cfg_);
      b_.rms_norm_rows(y, &m.norm, cfg_.rms_norm_eps);
      logits = b_.linear(y, head);
      b_.end_recording(logits, kept);
    }
    for (size_t c = 0; c < chunks.size(); ++c)
      chunks[c].state->mtp_tokens[static_cast<size_t>(i)] += static_cast<int64_t>(chunks[c].tokens.size());
    DraftOutput out;
    out.logits = sampling_stage(logits, stage, step, &kept);
    out.streams = std::move(out.logits.streams);
    out.logits.streams = Mat();
    return out;
  }

 private:
  // One layer (paper §2.2): mHC around attention, then around the MoE. `state_layer`: the layer's place in the
  // step's state layout.
  void layer(const LayerWeights& lw, AttentionType type, int64_t state_layer, Tensor& streams, const Step& step) {
    Tensor x;
    auto mix = b_.hc_pre(lw.hc_attn, streams, x, cfg_);
    b_.rms_norm_rows(x, &lw.attn_norm, cfg_.rms_norm_eps);
    b_.hc_post(mix, attention(lw.attn, type, state_layer, x, step), streams);
    mix = b_.hc_pre(lw.hc_ffn, streams, x, cfg_);
    b_.rms_norm_rows(x, &lw.ffn_norm, cfg_.rms_norm_eps);
    b_.hc_post(mix, moe(lw.ffn, x, step), streams);
  }

  // The sampling stage, where the logits are: the raw rows asked for go home first, then the logit processors
  // change their rows in place, then the allowed-token masks set the rest of their rows to -inf, then the picks
  // are made; only ids come home for those. `kept`: the step's kept streams, which come home after the late masks
  // are built (bringing them home waits for the forward).
  StepLogits sampling_stage(Tensor& logits, const LogitsStage& stage, const Step& step, const Tensor* kept = nullptr) {
    StepLogits out;
    // The masks that come late (logits_stage.h): built here, the forward queued above, so that a device computes it
    // meanwhile; whether it still was once they are ready says whether their time was hidden.
    std::vector<std::shared_ptr<const TokenMask>> late;
    if (stage.late_masks) {
      try {
        late = stage.late_masks();
        const auto expected = std::count_if(stage.rows.begin(), stage.rows.end(),
                                            [](const LogitsRowRequest& r) { return r.allowed_late; });
        if (static_cast<int64_t>(late.size()) != expected)
          fail("sampling stage: ", late.size(), " late masks came for ", expected, " rows with a late mask");
      } catch (...) {
        b_.end_step(step);  // nothing of the failed step is left running on the device
        throw;
      }
      out.late_masks_hidden = b_.computing();
    }

    std::vector<int64_t> raw_rows, penalised_rows, masked_rows, pick_rows, top_rows;
    std::vector<const RowPenalties*> penalties;
    std::vector<const TokenMask*> masks;
    std::vector<TokenPick> picks;
    size_t next_late = 0;  // late has one mask per allowed_late row (checked above)
    for (const LogitsRowRequest& r : stage.rows) {
      if (r.raw_home) raw_rows.push_back(r.row);
      if (!r.penalties.empty()) {
        penalised_rows.push_back(r.row);
        penalties.push_back(&r.penalties);
      }
      const TokenMask* mask = r.allowed.get();
      if (r.allowed_late) mask = late[next_late++].get();
      if (mask) {
        masked_rows.push_back(r.row);
        masks.push_back(mask);
      }
      if (r.top_probability) top_rows.push_back(r.row);
      if (r.pick) {
        pick_rows.push_back(r.row);
        picks.push_back(*r.pick);
        TokenPick& p = picks.back();
        if (mask && p.top_k > 0) p.top_k = std::min(p.top_k, allowed_count(*mask, cfg_.vocab_size));
      }
    }
    if (kept) {
      std::vector<int64_t> all(step.stream_rows.size());
      for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int64_t>(k);
      out.streams = b_.rows_to_host(*kept, all);
    }
    out.raw = b_.rows_to_host(logits, raw_rows);
    b_.apply_penalties(logits, penalised_rows, penalties);
    b_.mask_rows(logits, masked_rows, masks);
    const std::vector<float> top = b_.top_probabilities(logits, top_rows);
    const std::vector<int32_t> picked = b_.pick_rows(logits, pick_rows, picks);
    b_.end_step(step);
    out.picks.assign(stage.rows.size(), -1);
    for (size_t i = 0, next = 0; i < stage.rows.size(); ++i)
      if (stage.rows[i].pick) out.picks[i] = picked[next++];
    out.top_probs.assign(stage.rows.size(), -1.0f);
    for (size_t i = 0, next = 0; i < stage.rows.size(); ++i)
      if (stage.rows[i].top_probability) out.top_probs[i] = top[next++];
    return out;
  }

  // Shared-KV MQA with sinks over the sliding window plus compressed entries (paper §2.3).
  Tensor attention(const AttentionWeights& w, AttentionType type, int64_t layer, const Tensor& x, const Step& step) {
    const int64_t hd = cfg_.head_dim;
    const RopeTable& rope = type == AttentionType::Sliding ? rope_main_ : rope_compress_;

    // Every product of the block input x at once (a backend may run them as one; a GPU does at decode sizes): the
    // query's low-rank residual, the shared key-value, the compressors' inputs, the indexer's head weights.
    std::vector<const WeightRef*> from_x{&w.wq_a, &w.wkv};
    if (w.compressor) from_x.insert(from_x.end(), {&w.compressor->wkv, &w.compressor->wgate});
    if (w.indexer)
      from_x.insert(from_x.end(), {&w.indexer->compressor.wkv, &w.indexer->compressor.wgate, &w.indexer->weights_proj});
    std::vector<Tensor> of_x = b_.linear_many(x, from_x);
    Tensor& q_residual = of_x[0];
    b_.rms_norm_rows(q_residual, &w.q_norm, cfg_.rms_norm_eps);
    Tensor q = b_.linear(q_residual, w.wq_b);
    b_.head_rms_norm(q, hd, cfg_.rms_norm_eps);
    b_.rope(q, hd, rope, step, false);
    Tensor& kv = of_x[1];
    b_.rms_norm_rows(kv, &w.kv_norm, cfg_.rms_norm_eps);
    b_.rope(kv, hd, rope, step, false);
    b_.quantize_kv_rows(kv, 2 * rope.half());  // the form the window keeps (DeepSeek's numerics: FP8 non-RoPE dims)

    size_t next = 2;
    if (w.compressor) {
      b_.compress(*w.compressor, of_x[next], of_x[next + 1], step, layer, CompressorSlot::Attention, rope_compress_,
                  cfg_.rms_norm_eps);
      next += 2;
    }
    typename B::Picks picks{};
    if (w.indexer) {
      // Lightning Indexer (paper §2.3.1 eqs. 13–17): its own compressor, then per-query scores and top-k.
      const IndexerWeights& iw = *w.indexer;
      b_.compress(iw.compressor, of_x[next], of_x[next + 1], step, layer, CompressorSlot::Indexer, rope_compress_,
                  cfg_.rms_norm_eps);
      Tensor iq = b_.linear(q_residual, iw.wq_b);
      b_.rope(iq, cfg_.index_head_dim, rope_compress_, step, false);
      picks = b_.indexer_topk(iq, of_x[next + 2], step, layer, cfg_);
    }
    const AttentionKeys keys = w.indexer ? AttentionKeys::WindowAndPicked
                               : w.compressor ? AttentionKeys::WindowAndAllEntries
                                              : AttentionKeys::Window;
    Tensor out = b_.sparse_attention(q, kv, w.attn_sink, keys, picks, step, layer, cfg_);
    // K = V carries RoPE, so rotate the output back by its own position (relative positions only).
    b_.rope(out, hd, rope, step, true);
    b_.update_window(kv, step, layer, cfg_.sliding_window);

    // Grouped output projection: each group of heads → o_lora_rank, then one mix to hidden.
    return b_.linear(b_.grouped_linear(out, w.wo_a, cfg_.o_groups), w.wo_b);
  }

  // MoE (paper §2.1): hash layers take experts from tid2eid[token]; others the top-k of score + bias. Either way
  // the weights are the selected scores, normalised, times the routed scaling factor; a shared expert adds.
  Tensor moe(const MoeWeights& w, const Tensor& x, const Step& step) {
    const auto routing = b_.route(b_.linear(x, w.gate), w, step.rows.tokens, cfg_);
    return b_.experts(x, routing, w, cfg_);
  }

  const ModelConfig& cfg_;
  const ModelWeights& w_;
  const RopeTable& rope_main_;
  const RopeTable& rope_compress_;
  B& b_;
};

}  // namespace strata::model::v4
