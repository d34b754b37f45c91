// `strata generate`: prefill a prompt (optionally in chunks), decode greedily or by sampling, report speed, and
// optionally dump every logit row for comparison with a reference implementation.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/safetensors.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata generate — run token ids through a DeepSeek-V4 checkpoint on the CPU.

options:
  --model DIR          checkpoint directory (config.json + safetensors)
  --prompt-ids IDS     comma-separated prompt token ids, e.g. 5,6,7
  --max-tokens N       tokens to generate (default 16)
  --temperature T      0 = greedy (default); > 0 samples from softmax(logits / T)
  --seed S             sampling seed (default 0)
  --chunk N            prefill the prompt in chunks of N tokens (default: all at once); logits are the same
  --ignore-eos         keep generating past the config's eos_token_id
  --dump-logits FILE   write a safetensors file: prompt_logits [L, V] (every prompt position), gen_logits [N, V]
                       (row i = the logits gen_tokens[i] was chosen from) in F32, gen_tokens [N] in I64
  --dump-hidden FILE   write the prompt's residual streams after every layer, hidden.L [L, hc·hidden] (debugging)

Prints the generated ids (comma-separated) on stdout and timings on stderr.

example:
  strata model init --preset tiny --out /tmp/tiny
  strata generate --model /tmp/tiny --prompt-ids 5,6,7 --max-tokens 8 --temperature 0
)";

int32_t pick_token(const float* logits, int64_t vocab, double temperature, uint64_t& rng_state) {
  if (temperature <= 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  double max_logit = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  std::vector<double> p(static_cast<size_t>(vocab));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += p[i] = std::exp((logits[i] - max_logit) / temperature);
  // xorshift64* step: a uniform draw in [0, 1).
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  const double u = static_cast<double>((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0 * sum;
  double acc = 0;
  for (int64_t i = 0; i < vocab; ++i)
    if ((acc += p[i]) > u) return static_cast<int32_t>(i);
  return static_cast<int32_t>(vocab - 1);
}

}  // namespace

int generate_command(const std::vector<std::string>& argv) {
  const Args args(argv, {"model", "prompt-ids", "max-tokens", "temperature", "seed", "chunk", "dump-logits", "dump-hidden"},
                  {"help", "ignore-eos"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::string dir = args.required("model");
  const std::vector<int32_t> prompt = parse_id_list(args.required("prompt-ids"), "prompt-ids");
  const int64_t max_tokens = args.integer("max-tokens", 16);
  if (max_tokens < 0) fail("option --max-tokens: expected a non-negative integer, found ", max_tokens);
  const double temperature = args.number("temperature", 0.0);
  if (temperature < 0 || !std::isfinite(temperature)) fail("option --temperature: expected a number ≥ 0, found ", temperature);
  const int64_t chunk = args.integer("chunk", 0);
  if (chunk < 0) fail("option --chunk: expected a positive chunk size, found ", chunk);
  uint64_t rng_state = static_cast<uint64_t>(args.integer("seed", 0)) * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;

  const model::v4::Model m = model::v4::load_model(dir);
  const int64_t vocab = m.config().vocab_size;
  for (int32_t id : prompt)
    if (id >= vocab) fail("option --prompt-ids: token id ", id, " is outside the model's vocabulary [0, ", vocab, ")");
  const bool dump = args.has("dump-logits");
  model::v4::SequenceState state = m.new_sequence();

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::vector<float> prompt_logits;
  Mat last;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size()), step = chunk > 0 ? chunk : n_prompt;
  std::vector<std::vector<float>> hidden(static_cast<size_t>(m.config().num_hidden_layers));
  const auto keep_hidden = [&](int64_t layer, const Mat& streams) {
    hidden[layer].insert(hidden[layer].end(), streams.v.begin(), streams.v.end());
  };
  for (int64_t at = 0; at < n_prompt; at += step) {
    const std::vector<int32_t> part(prompt.begin() + at, prompt.begin() + std::min(n_prompt, at + step));
    last = args.has("dump-hidden") ? m.forward(part, state, dump, keep_hidden) : m.forward(part, state, dump);
    if (dump) prompt_logits.insert(prompt_logits.end(), last.v.begin(), last.v.end());
  }
  const auto t1 = clock::now();

  std::vector<int32_t> generated;
  std::vector<float> gen_logits;
  const float* logits = last.row(last.rows - 1);
  const auto& eos = m.config().eos_token_ids;
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int32_t token = pick_token(logits, vocab, temperature, rng_state);
    generated.push_back(token);
    if (dump) gen_logits.insert(gen_logits.end(), logits, logits + vocab);
    const bool is_eos = std::find(eos.begin(), eos.end(), token) != eos.end();
    if (i + 1 == max_tokens || (is_eos && !args.has("ignore-eos"))) break;
    last = m.forward({token}, state, false);
    logits = last.row(0);
  }
  const auto t2 = clock::now();

  for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? "," : "", generated[i]);
  std::printf("\n");
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const double decode_steps = static_cast<double>(generated.size() > 0 ? generated.size() - 1 : 0);
  std::fprintf(stderr, "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %zu tokens in %.3f s (%.1f tokens/s)\n",
               static_cast<long long>(n_prompt), prefill_s, n_prompt / prefill_s, generated.size(), decode_s,
               decode_steps > 0 ? decode_steps / decode_s : 0.0);

  if (args.has("dump-hidden")) {
    std::vector<model::OwnedTensor> out;
    const int64_t width = m.config().hc_mult * m.config().hidden_size;
    for (size_t l = 0; l < hidden.size(); ++l)
      out.push_back(model::make_f32_tensor("hidden." + std::to_string(l), {n_prompt, width}, hidden[l]));
    model::write_safetensors(args.str("dump-hidden"), out, {{"producer", "strata generate"}});
  }
  if (dump) {
    std::vector<int64_t> tokens64(generated.begin(), generated.end());
    std::vector<model::OwnedTensor> out;
    out.push_back(model::make_f32_tensor("prompt_logits", {n_prompt, vocab}, prompt_logits));
    out.push_back(model::make_f32_tensor("gen_logits", {static_cast<int64_t>(generated.size()), vocab}, gen_logits));
    model::OwnedTensor toks;
    toks.name = "gen_tokens";
    toks.dtype = DType::I64;
    toks.shape = {static_cast<int64_t>(tokens64.size())};
    toks.bytes.resize(tokens64.size() * 8);
    std::memcpy(toks.bytes.data(), tokens64.data(), toks.bytes.size());
    out.push_back(std::move(toks));
    model::write_safetensors(args.str("dump-logits"), out, {{"producer", "strata generate"}});
  }
  return 0;
}

}  // namespace strata::cli
