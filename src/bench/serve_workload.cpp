#include "bench/serve_workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"

namespace strata::bench {

namespace {

// Lower-case "words" of 2–7 letters: text that a BPE tokenizer turns into roughly one or two tokens a word.
std::string random_words(std::mt19937_64& rng, int64_t count) {
  std::uniform_int_distribution<int> length(2, 7), letter(0, 25);
  std::string out;
  for (int64_t w = 0; w < count; ++w) {
    if (w) out += ' ';
    for (int i = length(rng); i > 0; --i) out += static_cast<char>('a' + letter(rng));
  }
  return out;
}

int64_t draw_length(std::mt19937_64& rng, int64_t len, double ratio) {
  if (ratio <= 0) return len;
  const auto lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - ratio)));
  const auto hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1 + ratio)));
  return std::uniform_int_distribution<int64_t>(std::max<int64_t>(lo, 1), std::max<int64_t>(hi, 1))(rng);
}

}  // namespace

std::vector<BenchPrompt> make_workload(const WorkloadConfig& c) {
  const bool growing = c.dataset == "growing-history";
  const bool shared = c.dataset == "shared-prefix" || growing;
  if (c.dataset != "random" && !shared)
    fail("dataset: expected random, shared-prefix or growing-history, found '", c.dataset, "'");
  if (growing && c.input_len < 1) fail("input-len: growing-history adds --input-len tokens a turn: expected ≥ 1");
  if (c.num_prompts < 1) fail("num-prompts: expected ≥ 1, found ", c.num_prompts);
  if (c.input_len < 1 && !(shared && c.prefix_len > 0)) fail("input-len: expected ≥ 1, found ", c.input_len);
  if (c.input_len < 0) fail("input-len: expected ≥ 0, found ", c.input_len);
  if (c.output_len < 1) fail("output-len: expected ≥ 1, found ", c.output_len);
  if (c.prefix_len < 0) fail("prefix-len: expected ≥ 0, found ", c.prefix_len);
  if (shared && c.prefix_len == 0) fail("prefix-len: the ", c.dataset, " dataset needs a prefix (--prefix-len > 0)");
  if (!shared && c.prefix_len > 0) fail("prefix-len: only the shared-prefix and growing-history datasets have a prefix");
  if (c.num_prefixes < 1) fail("num-prefixes: expected ≥ 1, found ", c.num_prefixes);
  if (!(c.range_ratio >= 0 && c.range_ratio < 1)) fail("range-ratio: expected a number in [0, 1), found ", c.range_ratio);
  if (c.token_lo < 0 || c.token_hi <= c.token_lo)
    fail("token-ids: expected 0 ≤ LO < HI, found ", c.token_lo, ":", c.token_hi);

  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<int32_t> token(c.token_lo, c.token_hi - 1);
  std::vector<std::vector<int32_t>> prefix_ids;
  std::vector<std::string> prefix_text;
  for (int64_t g = 0; shared && g < c.num_prefixes; ++g) {
    if (c.chat) {
      prefix_text.push_back(random_words(rng, c.prefix_len));
    } else {
      std::vector<int32_t>& ids = prefix_ids.emplace_back();
      for (int64_t i = 0; i < c.prefix_len; ++i) ids.push_back(token(rng));
    }
  }
  std::vector<BenchPrompt> prompts;
  prompts.reserve(static_cast<size_t>(c.num_prompts));
  for (int64_t r = 0; r < c.num_prompts; ++r) {
    BenchPrompt p;
    const int64_t suffix = c.input_len > 0 ? draw_length(rng, c.input_len, c.range_ratio) : 0;
    p.output_len = draw_length(rng, c.output_len, c.range_ratio);
    const auto group = static_cast<size_t>(r % c.num_prefixes);
    if (growing) {
      // The conversation's history grows by this turn's tokens; the prompt is all of it.
      if (c.chat) {
        prefix_text[group] += " " + random_words(rng, suffix);
        p.text = prefix_text[group];
      } else {
        for (int64_t i = 0; i < suffix; ++i) prefix_ids[group].push_back(token(rng));
        p.ids = prefix_ids[group];
      }
      p.input_len = c.chat ? static_cast<int64_t>(std::count(p.text.begin(), p.text.end(), ' ')) + 1
                           : static_cast<int64_t>(p.ids.size());
      prompts.push_back(std::move(p));
      continue;
    }
    if (c.chat) {
      if (shared) p.text = prefix_text[group] + (suffix ? " " : "");
      p.text += random_words(rng, suffix);
    } else {
      if (shared) p.ids = prefix_ids[group];
      for (int64_t i = 0; i < suffix; ++i) p.ids.push_back(token(rng));
    }
    p.input_len = (shared ? c.prefix_len : 0) + suffix;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

}  // namespace strata::bench
