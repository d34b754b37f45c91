#pragma once
// The interface every model of the DeepSeek family implements (today DeepSeek-V4: model/deepseek_v4/model.h), and
// all that engine/, server/ and cli/ know of a model: run a step of several sequences up to the logits and their
// sampling stage; make, copy, fork, roll back, save and restore a sequence's state. model_family.h says how to get
// one; config.json's model_type (ModelConfig::variant) picks the implementation.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/block_pool.h"
#include "model/config.h"
#include "model/device.h"
#include "model/logits_stage.h"
#include "model/model_fingerprint.h"
#include "model/sequence_state.h"
#include "model/shared_region.h"
#include "model/state_layout.h"
#include "model/state_restore.h"

namespace strata::model {

// One sequence's part of a forward step: its next tokens (positions state->num_tokens onwards) and its state. What
// happens to its logits rows afterwards is the step's sampling stage (model/logits_stage.h), not the chunk's.
struct SequenceChunk {
  std::vector<int32_t> tokens;
  SequenceState* state = nullptr;
  bool all_logits = false;  // logits for every token, or only the last
};

// One sequence's part of an MTP draft step (speculative decoding with the model's own MTP layers; docs/mtp.md): rows
// for MTP positions p = state->mtp_tokens[layer] onwards. Row i joins the hidden streams of position p + i — the main
// model's last-layer streams before its HyperHead (what a LayerObserver sees after the last layer), or, drafting
// further ahead, the MTP layer's own output streams of position p + i - 1 — with the token at position p + i + 1.
struct DraftChunk {
  Mat streams;                  // [tokens.size(), hc_mult·hidden]
  std::vector<int32_t> tokens;  // the next token of each row's position
  SequenceState* state = nullptr;
  bool all_logits = false;      // draft logits for every row, or only the last
  // Without all_logits, the row whose draft logits and output streams the step gives (-1: the last). Rows after it
  // are spare: computed so that the step has a fixed shape (a catch-up over every verified row, the rejected ones
  // included, replays one CUDA graph whatever was accepted), their outputs unused and their MTP-ring positions
  // dropped again by the caller (SequenceState::rollback_mtp).
  int64_t logits_row = -1;
};

// A draft step's result: the logits rows' sampling stage as run_step's, and the MTP layer's output streams of
// those rows (the input of the next draft position when one MTP layer drafts several tokens).
struct DraftOutput {
  StepLogits logits;
  Mat streams;  // [logits rows, hc_mult·hidden]
};

// Sees the residual streams [rows, hc·hidden] after every layer (debugging parity: strata generate --dump-hidden).
using LayerObserver = std::function<void(int64_t layer, const Mat& streams)>;

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  virtual Device device() const = 0;
  virtual Precision precision() const = 0;

  // Where a sequence's state lives (state_layout.h): its fixed block, and token blocks of `block_tokens` tokens.
  virtual const StateLayout& state_layout() const = 0;
  int64_t fixed_state_floats() const { return state_layout().fixed_floats; }
  int64_t blocks_for_tokens(int64_t tokens) const { return state_layout().blocks_for_tokens(tokens); }
  // A fresh state. Its token blocks come from `pool` (a StatePool's bounded one, made by make_block_pool) or, when
  // null, from a pool the state owns: growable on the CPU, sized for `max_tokens` (required) on a GPU.
  virtual SequenceState new_sequence(BlockPool* pool = nullptr, int64_t max_tokens = 0) const = 0;
  // A bounded pool of token blocks where this model computes.
  virtual std::unique_ptr<BlockPool> make_block_pool(int64_t max_blocks) const = 0;
  // Makes `to` continue exactly where `from` is, with blocks of its own (false, `to` reset: no room in its pool).
  virtual bool copy_state(const SequenceState& from, SequenceState& to) const = 0;
  // The same, sharing `from`'s full blocks by reference and copying the partial last one (one pool for both).
  virtual bool fork_state(const SequenceState& from, SequenceState& to) const = 0;
  // Keeps the first `num_tokens` tokens of `state` and drops the rest (at most state_layout().max_rollback).
  virtual void rollback(SequenceState& state, int64_t num_tokens) const = 0;

  // What decides this model's numbers, hashed; a state's bytes restore only into a model with the same one.
  virtual ModelFingerprint fingerprint() const = 0;
  virtual std::string snapshot(const SequenceState& state) const = 0;
  virtual void restore(std::string_view bytes, SequenceState& into) const = 0;
  // The same snapshot, piece by piece (a header, then one piece per layer), each handed to `piece` as soon as it is
  // made: a transfer sends early layers while later ones are still being read off the device. With `floats_into`
  // (same-host transfer), the state's floats are copied into that region (device to device) and the pieces carry
  // only the skeleton: counts, offsets into the region, checksums; the region must hold snapshot_floats(state).
  virtual void snapshot_pieces(const SequenceState& state, const std::function<void(std::string)>& piece,
                               SharedRegion* floats_into) const = 0;
  virtual int64_t snapshot_floats(const SequenceState& state) const = 0;
  // A restore into `into` that takes the snapshot's bytes as they arrive (state_restore.h). Token blocks `into`
  // already holds (reserved before the bytes came: a decode replica's pre-allocated slot) are used, not released.
  // `floats_from`: the region a skeleton's floats are in (null: the bytes carry them; a skeleton is then refused).
  virtual std::unique_ptr<StateRestore> begin_restore(SequenceState& into, const SharedRegion* floats_from) const = 0;
  // Memory another engine process of this host can open by handle (model/shared_region.h); throw naming the cause.
  virtual std::unique_ptr<SharedRegion> make_shared_region(int64_t floats) const = 0;
  virtual std::unique_ptr<SharedRegion> open_shared_region(const std::string& handle) const = 0;
  // Waits until this model's copies of state are done (before another process reads what they wrote).
  virtual void synchronize() const = 0;

  // A prefix cache's view (cache/): a state at a token-block boundary is its token blocks (content-addressed,
  // shared by every longer prefix) plus its boundary rows (sliding window, the compressors' open windows).
  // Block `index` of `state` into host memory (block_floats floats).
  virtual void read_block(const SequenceState& state, int64_t index, float* host) const = 0;
  // The rows a resume from `state` needs beside its token blocks (deepseek_v4/state_snapshot.h's RowsOnly bytes).
  virtual std::string boundary_rows(const SequenceState& state) const = 0;
  // Makes `into` the state of a block-aligned prefix: its blocks, each either shared by reference from `into`'s
  // pool (a block another sequence holds) or copied from host memory, then its boundary rows. Throws naming the
  // problem (bad rows, too few blocks, an exhausted pool), leaving `into` reset.
  struct PrefixBlock {
    int32_t shared = -1;          // a block of into's pool to take a reference on, or
    const float* host = nullptr;  // block_floats floats to copy in
  };
  virtual void restore_prefix(const std::vector<PrefixBlock>& blocks, std::string_view boundary_rows,
                              SequenceState& into) const = 0;
  // Bounded replay (the prefix cache's "replay" mode, which stores no boundary rows): `into` gets the blocks of a
  // prefix of n = blocks.size()·B tokens but stands at `replay_from`, with empty rings below it. Running tokens
  // [replay_from, n) through a forward then rebuilds the sliding window and the compressors' rings — approximately,
  // as those tokens see no window before replay_from — while the restored entries stay (sequence_state.h). Throws
  // when replay_from leaves fewer tokens than the window (and the compressors) need, or the pool is exhausted.
  virtual void restore_prefix_for_replay(const std::vector<PrefixBlock>& blocks, int64_t replay_from,
                                         SequenceState& into) const = 0;

  // One step over several sequences: the logits of their logits rows stay where they were computed; `stage` says
  // what happens to each there (logits_stage.h: raw rows home, penalties, picks) and what comes home.
  virtual StepLogits run_step(std::vector<SequenceChunk>& chunks, const LogitsStage& stage,
                              const LayerObserver& observe = {}) const = 0;
  // run_step with every logits row home: one logits Mat per chunk (tests, benchmarks, dumps).
  virtual std::vector<Mat> forward_batch(std::vector<SequenceChunk>& chunks, const LayerObserver& observe = {}) const = 0;
  // One sequence: logits [tokens, vocab] when all_logits, else the last token's [1, vocab].
  virtual Mat forward(const std::vector<int32_t>& tokens, SequenceState& state, bool all_logits = true,
                      const LayerObserver& observe = {}) const = 0;

  // MTP draft layers (docs/mtp.md): how many the checkpoint has, and a draft step through layer `mtp_layer`, which
  // advances each chunk's state->mtp_tokens[mtp_layer] (SequenceState::rollback_mtp drops positions again).
  virtual int64_t mtp_layers() const { return 0; }
  // The draft vocabulary (docs/mtp.md, "A reduced draft vocabulary"): the token ids the MTP head scores, in the
  // order of the draft logits' columns; empty when it scores the whole vocabulary (then column = id).
  virtual const std::vector<int32_t>& draft_vocabulary() const {
    static const std::vector<int32_t> none;
    return none;
  }
  virtual DraftOutput run_draft(std::vector<DraftChunk>& chunks, const LogitsStage& stage,
                                int64_t mtp_layer = 0) const = 0;

  // Per layer, the distinct routed experts the last forward ran (what a step must read of the expert weights).
  virtual std::vector<int64_t> routed_experts_last_forward() const = 0;
  // Steps run from a recording (CUDA graphs of decode steps) so far.
  virtual int64_t steps_replayed() const = 0;
};

}  // namespace strata::model
