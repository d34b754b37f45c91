#include "cli/bench_replay.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata::cli {

namespace {

using model::SequenceState;

int32_t argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// Greedy tokens from `st`, whose last forward's logits row is `last`.
std::vector<int32_t> greedy(const model::Model& m, SequenceState& st, const float* last, int64_t count) {
  const int64_t vocab = m.config().vocab_size;
  std::vector<int32_t> out{argmax(last, vocab)};
  while (static_cast<int64_t>(out.size()) < count) {
    const Mat logits = m.forward({out.back()}, st, false);
    out.push_back(argmax(logits.row(0), vocab));
  }
  return out;
}

// One prompt length: the cold logits of its tail, then per K the replay's.
nlohmann::json one_length(const model::Model& m, const std::vector<int32_t>& ids, int64_t len,
                          const std::vector<int64_t>& replays, int64_t continuation) {
  const int64_t B = m.state_layout().block_tokens, vocab = m.config().vocab_size;
  const int64_t k = (len - 1) / B, boundary = k * B;  // the cached prefix: the prompt's last block boundary
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + len);
  SequenceState cold_state = m.new_sequence(nullptr, len + continuation + 1);
  const Mat cold = m.forward(prompt, cold_state, true);
  // The prefix's blocks as a cold prefill wrote them (what the cache would hold).
  std::vector<std::vector<float>> blocks(static_cast<size_t>(k));
  std::vector<model::Model::PrefixBlock> prefix;
  for (int64_t b = 0; b < k; ++b) {
    blocks[static_cast<size_t>(b)].resize(static_cast<size_t>(m.state_layout().block_floats));
    m.read_block(cold_state, b, blocks[static_cast<size_t>(b)].data());
    prefix.push_back({-1, blocks[static_cast<size_t>(b)].data()});
  }
  const std::vector<int32_t> cold_greedy = greedy(m, cold_state, cold.row(len - 1), continuation);

  nlohmann::json rows = nlohmann::json::array();
  for (const int64_t K : replays) {
    if (K > boundary) continue;
    const int64_t from = boundary - K;
    SequenceState st = m.new_sequence(nullptr, len + continuation + 1);
    m.restore_prefix_for_replay(prefix, from, st);
    const Mat got = m.forward(std::vector<int32_t>(prompt.begin() + from, prompt.end()), st, true);
    // The tail after the boundary: what a cache hit computes logits for.
    double most = 0, sum = 0;
    int64_t agree = 0;
    for (int64_t p = boundary; p < len; ++p) {
      const float *a = got.row(p - from), *c = cold.row(p);
      for (int64_t v = 0; v < vocab; ++v) {
        const double d = std::abs(static_cast<double>(a[v]) - c[v]);
        most = std::max(most, d);
        sum += d;
      }
      agree += argmax(a, vocab) == argmax(c, vocab);
    }
    const std::vector<int32_t> replay_greedy = greedy(m, st, got.row(len - 1 - from), continuation);
    int64_t same_prefix = 0;
    while (same_prefix < continuation && replay_greedy[static_cast<size_t>(same_prefix)] == cold_greedy[static_cast<size_t>(same_prefix)])
      ++same_prefix;
    const int64_t tail = len - boundary;
    rows.push_back({{"replay_tokens", K},
                    {"tail_positions", tail},
                    {"max_abs_logit_delta", most},
                    {"mean_abs_logit_delta", sum / static_cast<double>(tail * vocab)},
                    {"top1_agreement", static_cast<double>(agree) / static_cast<double>(tail)},
                    {"greedy_tokens_compared", continuation},
                    {"greedy_tokens_equal_before_first_difference", same_prefix}});
  }
  return {{"prompt_tokens", len}, {"cached_prefix_tokens", boundary}, {"replays", rows}};
}

// Bytes each mode keeps for a prompt of `len` tokens saved at its checkpoints (every `every` blocks and its last
// block boundary), from one block's and one boundary's bytes.
nlohmann::json storage(const model::Model& m, const std::vector<int64_t>& lengths, int64_t every) {
  const int64_t B = m.state_layout().block_tokens;
  const int64_t block_bytes = m.state_layout().block_floats * static_cast<int64_t>(sizeof(float));
  // A boundary's rows, measured: the bytes exact mode stores at a checkpoint besides the blocks.
  SequenceState st = m.new_sequence(nullptr, B + 1);
  std::vector<int32_t> tokens(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(2 + i);
  m.forward(tokens, st, false);
  const auto rows_bytes = static_cast<int64_t>(m.boundary_rows(st).size());
  nlohmann::json prompts = nlohmann::json::array();
  for (const int64_t len : lengths) {
    const int64_t blocks = (len - 1) / B;
    const int64_t checkpoints = blocks / every + (blocks % every != 0);
    const int64_t exact = blocks * block_bytes + checkpoints * rows_bytes, replay = blocks * block_bytes;
    prompts.push_back({{"prompt_tokens", len},
                       {"blocks", blocks},
                       {"checkpoints", checkpoints},
                       {"exact_bytes", exact},
                       {"replay_bytes", replay},
                       {"replay_over_exact", replay > 0 ? static_cast<double>(replay) / static_cast<double>(exact) : 0.0}});
  }
  return {{"block_tokens", B},
          {"block_bytes", block_bytes},
          {"boundary_rows_bytes", rows_bytes},
          {"rows_over_block", static_cast<double>(rows_bytes) / static_cast<double>(block_bytes)},
          {"checkpoint_every_blocks", every},
          {"prompts", prompts}};
}

}  // namespace

nlohmann::json cache_replay(const model::Model& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& lengths,
                            const std::vector<int64_t>& replays, int64_t continuation, int64_t checkpoint_every_blocks) {
  const int64_t B = m.state_layout().block_tokens;
  if (m.state_layout().block_floats == 0) fail("bench --cache-replay: this model keeps no token blocks to cache");
  for (const int64_t K : replays)
    if (K < m.config().sliding_window)
      fail("bench --cache-replay: replaying ", K, " tokens, fewer than the sliding window (", m.config().sliding_window, ")");
  nlohmann::json out = {{"storage", storage(m, lengths, checkpoint_every_blocks)}};
  if (ids.empty()) return out;  // storage only
  nlohmann::json quality = nlohmann::json::array();
  for (const int64_t len : lengths) {
    if (len > static_cast<int64_t>(ids.size()))
      fail("bench --cache-replay: a prompt of ", len, " tokens from a text of ", ids.size());
    if (len <= B) fail("bench --cache-replay: a prompt of ", len, " tokens has no full block (", B, " tokens) to cache");
    quality.push_back(one_length(m, ids, len, replays, continuation));
  }
  out["text_tokens"] = ids.size();
  out["accuracy"] = quality;
  return out;
}

}  // namespace strata::cli
