#pragma once
// The DeepSeek-V4 forward pass on the CPU reference backend. Each function below maps to a section of the paper:
// mHC (§2.2), CSA/HCA attention with the Lightning Indexer (§2.3), hash and top-k MoE (§2.1).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace strata::model::v4 {

// One sequence's part of a forward step: its next tokens (positions state->num_tokens onwards) and its state.
struct SequenceChunk {
  std::vector<int32_t> tokens;
  SequenceState* state = nullptr;
  bool all_logits = false;  // logits for every token, or only the last
};

class Model {
 public:
  Model(ModelConfig config, ModelWeights weights);

  const ModelConfig& config() const { return cfg_; }
  // A fresh state. Compressed entries go to `arena` (a StatePool's bounded one) or, when null, to a growable
  // arena the state owns.
  SequenceState new_sequence(EntryPageArena* arena = nullptr) const;

  // Runs `tokens` at positions state.num_tokens, state.num_tokens + 1, … and advances the state.
  // Returns logits [tokens.size(), vocab] when all_logits, else only the last token's [1, vocab].
  // `observe`, if given, sees the residual streams [tokens, hc·hidden] after every layer (for debugging parity).
  Mat forward(const std::vector<int32_t>& tokens, SequenceState& state, bool all_logits = true,
              const std::function<void(int64_t layer, const Mat& streams)>& observe = {}) const;

  // One step over several sequences: the projections and experts run once over all rows (weights are read once),
  // attention and compression per sequence. Every row's arithmetic is the same as in a solo forward, so results
  // are bit-identical however sequences are batched. Returns one logits Mat per chunk.
  std::vector<Mat> forward_batch(std::vector<SequenceChunk>& chunks,
                                 const std::function<void(int64_t layer, const Mat& streams)>& observe = {}) const;

 private:
  struct HcMix;  // pre/post/comb weights of one hyper-connection site for a batch of tokens
  struct Rows;   // which rows of a step belong to which sequence, and their positions

  HcMix hc_pre(const HyperConnectionWeights& w, const Mat& streams, Mat& collapsed) const;
  void hc_post(const HcMix& mix, const Mat& block_out, Mat& streams) const;
  Mat attention(int64_t layer, const Mat& x, const Rows& rows, std::vector<SequenceChunk>& chunks) const;
  void compress(const CompressorWeights& w, const Mat& kv, const Mat& gate, int64_t first_row, int64_t n_rows,
                CompressorState& st) const;
  std::vector<std::vector<int32_t>> indexer_topk(const IndexerWeights& w, const Mat& x, const Mat& q_residual,
                                                 const Rows& rows, std::vector<SequenceChunk>& chunks,
                                                 int64_t layer) const;
  Mat moe(const MoeWeights& w, const Mat& x, const std::vector<int32_t>& tokens) const;
  Mat expert(const ExpertWeights& w, const Mat& x) const;

  ModelConfig cfg_;
  ModelWeights w_;
  RopeTable rope_main_, rope_compress_;
};

// Reads config.json and the safetensors of a checkpoint directory and checks every tensor.
Model load_model(const std::string& dir);

}  // namespace strata::model::v4
