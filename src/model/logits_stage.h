#pragma once
// The sampling stage of a step, as plain data (but for one late part, the grammar masks built while the forward
// runs: LogitsStage::late_masks): what happens to each logits row where the logits were computed (on a GPU, the
// device), after the forward and before anything comes home. The engine's model runner builds it from the
// step plan; the backends carry it out as ops (rows_to_host, apply_penalties, pick_rows); backend/cpu/sampling.h is
// the readable reference of every op's meaning. Nothing here knows about requests or sequences.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace strata::model {

// One row's pick. Greedy (temperature 0): the first maximum. Otherwise a draw over softmax(logits / temperature)
// restricted by top-k, min-p and top-p, walking a fixed order of the kept tokens to the first whose running mass
// passes uniform · total. The draw `uniform` is computed by the caller (engine::counter_uniform(seed, step)), so a
// seeded request picks the same token whichever backend picks it.
struct TokenPick {
  double temperature = 0.0;  // 0 = greedy, else > 0
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1]
  double uniform = 0.0;      // the draw, in [0, 1)
  bool greedy() const { return temperature == 0.0; }
};

// Logit processors applied to one row in place before its pick, in this order (OpenAI / vLLM semantics):
// 1. bias: logits[id] += amount (a request's logit_bias, on the raw logits, as vLLM applies it before penalties);
// 2. repetition: each id in `seen` (prompt and output tokens) gets l / repetition if l > 0, else l · repetition;
// 3. subtract: logits[id] -= amount (presence + frequency · count, computed by the caller in double, then rounded
//    to float once, as the host sampler does).
struct RowPenalties {
  std::vector<std::pair<int32_t, float>> bias;       // distinct ids
  float repetition = 1.0f;
  std::vector<int32_t> seen;                         // distinct ids
  std::vector<std::pair<int32_t, float>> subtract;   // distinct ids
  bool empty() const { return bias.empty() && (repetition == 1.0f || seen.empty()) && subtract.empty(); }
};

// Which tokens a row may pick (structured outputs): bit (id % 32) of word id / 32 set = token id is allowed; at least
// ceil(vocab / 32) words (ids past the last word are not allowed). The grammar engine fills it
// (text/grammar/grammar_matcher.h) in this layout, so the words go to the device as they are.
using TokenMask = std::vector<uint32_t>;

// What the step does with one of its logits rows (rows are numbered chunk after chunk, as StepRows::logits_rows).
struct LogitsRowRequest {
  int64_t row = 0;
  bool raw_home = false;             // the unprocessed row comes home (logprobs, logits dumps)
  RowPenalties penalties;            // applied in place before the pick
  std::optional<TokenPick> pick;     // a token is chosen where the logits are; only its id comes home
  // Applied after the penalties, before the pick: every token it does not allow gets -inf (null: all allowed). The
  // raw row that comes home is the model's, unmasked (vLLM's default for logprobs). A pick's top_k past the count
  // of allowed tokens is cut to that count: the same draw (the others have probability 0), and a device then never
  // walks the crowd of -inf logits (backend/cuda/sampling.cu).
  std::shared_ptr<const TokenMask> allowed;
  // The row's mask comes from the stage's late_masks instead (`allowed` stays null).
  bool allowed_late = false;
  // The probability of the row's most likely token after the penalties and the mask, at temperature 1
  // (cpu::top_probability), comes home in StepLogits::top_probs: a greedy MTP draft's confidence without its
  // vocabulary row (0.5 MB) coming home and being exponentiated on the host.
  bool top_probability = false;
};

// A step's masks that are not known when the step starts: one per row with allowed_late, in row order (null: that
// row is not masked after all).
using LateMasks = std::function<std::vector<std::shared_ptr<const TokenMask>>()>;

struct LogitsStage {
  std::vector<LogitsRowRequest> rows;  // each logits row at most once, in increasing row order
  // Structured outputs: a grammar mask depends on the sequence's last token, and building a batch's masks on the
  // CPU costs as much as a good part of a GPU decode step. So the step starts without them: the backend calls this
  // once, after it has queued the forward and before the sampling stage needs the masks, and the CPU builds them
  // while the device computes (on the CPU backend the forward has run by then: the same masks, no overlap). An
  // exception from it ends the step (after the device has finished what was queued) and leaves run_step with it.
  LateMasks late_masks = {};
  // Speculative decoding with the model's MTP layers (docs/mtp.md): step rows (numbered chunk after chunk, as
  // StepRows: chunk c's token i is row first[c] + i; not logits rows) whose residual streams after the last layer,
  // before the HyperHead ([hc_mult·hidden] each), come home in StepLogits::streams, in this order. The MTP layer
  // drafts from them.
  std::vector<int64_t> stream_rows = {};
};

// What came home: per request, its picked id (-1 without a pick) and, for requests with raw_home, its raw row in
// `raw` (in request order).
struct StepLogits {
  std::vector<int32_t> picks;
  std::vector<float> top_probs;  // per request: its top_probability, -1 for requests that did not ask
  Mat raw;
  Mat streams;  // [stage.stream_rows.size(), hc_mult·hidden]: the last layer's streams of those rows
  // With late_masks: whether the device was still computing the forward when they were ready, i.e. their building
  // was wholly hidden behind it (false on the CPU backend, which computes on the calling thread).
  bool late_masks_hidden = false;
};

// The tokens of the vocabulary [0, vocab) that `allowed` allows.
inline int64_t allowed_count(const TokenMask& allowed, int64_t vocab) {
  int64_t n = 0;
  const auto words = std::min<size_t>(allowed.size(), static_cast<size_t>(vocab / 32));
  for (size_t w = 0; w < words; ++w) n += std::popcount(allowed[w]);
  for (int64_t id = static_cast<int64_t>(words) * 32; id < vocab && id / 32 < static_cast<int64_t>(allowed.size()); ++id)
    n += (allowed[static_cast<size_t>(id / 32)] >> (id % 32)) & 1u;
  return n;
}

}  // namespace strata::model
