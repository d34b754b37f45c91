#pragma once
// The sampling stage of a step, as plain data: what happens to each logits row where the logits were computed (on a
// GPU, the device), after the forward and before anything comes home. The engine's model runner builds it from the
// step plan; the backends carry it out as ops (rows_to_host, apply_penalties, pick_rows); backend/cpu/sampling.h is
// the readable reference of every op's meaning. Nothing here knows about requests or sequences.
#include <cstdint>
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
  // raw row that comes home is the model's, unmasked (vLLM's default for logprobs).
  std::shared_ptr<const TokenMask> allowed;
};

struct LogitsStage {
  std::vector<LogitsRowRequest> rows;  // each logits row at most once, in increasing row order
};

// What came home: per request, its picked id (-1 without a pick) and, for requests with raw_home, its raw row in
// `raw` (in request order).
struct StepLogits {
  std::vector<int32_t> picks;
  Mat raw;
};

}  // namespace strata::model
