// `strata bench`: prefill and decode throughput of one checkpoint on this machine, written as JSON (device, date,
// commit, config, medians over repeats after a warm-up).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/state_pool.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata bench — prefill and decode tokens/s of a checkpoint on the CPU or CUDA backend.

Each repeat starts a fresh sequence, prefills --prompt-len tokens in one forward, then decodes --decode-tokens
tokens greedily, one forward each. One warm-up repeat is not counted; reported numbers are medians.

options:
  --model DIR          checkpoint directory
  --device cpu|cuda    the backend (default cpu)
  --prompt-len N       prompt tokens (default 512)
  --decode-tokens N    decode steps after the prompt (default 32)
  --repeats N          timed repeats (default 3)
  --batch LIST         also time batched decode steps: for each context length, one sequence is prefilled
                       (in chunks of --chunk) and forked into B sequences (B from LIST, e.g. 1,8,32,64), then
                       --decode-tokens steps run all B in one forward each; reports step time, tokens/s per
                       device (B / step) and per user (1 / step)
  --context LIST       context lengths for --batch (default: --prompt-len), e.g. 4096,32768
  --chunk N            prefill chunk for --batch contexts (default 4096)
  --commit SHA         git commit to record (default: unknown)
  --out FILE           write the JSON here (default: print it)

example:
  strata model init --preset small --out /tmp/small
  strata bench --model /tmp/small --prompt-len 512 --decode-tokens 32 --commit $(git rev-parse HEAD) --out bench/results/cpu_small.json
  strata bench --model /tmp/flash4 --device cuda --batch 1,8,32,64 --context 4096 --decode-tokens 16
)";

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

nlohmann::json device_description(model::v4::Device device) {
  nlohmann::json d = {{"backend", model::v4::device_name(device)}, {"cpu", cpu_model_name()},
                      {"threads", omp_get_max_threads()}};
  if (device == model::v4::Device::Cuda) d["gpu"] = model::v4::cuda_device_name();
  return d;
}

double median(std::vector<double> v);

// Decode steps of `batch` sequences at `context` tokens each: one prefilled sequence is forked into a pool (the
// same state in every slot), then every step runs all of them in one forward_batch.
nlohmann::json batched_decode(const model::v4::Model& m, int64_t context, int64_t chunk,
                              const std::vector<int64_t>& batches, int64_t steps) {
  using clock = std::chrono::steady_clock;
  const int64_t vocab = m.config().vocab_size;
  model::v4::SequenceState source = m.new_sequence(nullptr, context + 1);
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (int64_t i = 0; i < context; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 17) % vocab);
  const auto p0 = clock::now();
  for (int64_t at = 0; at < context; at += chunk) {
    const int64_t n = std::min(chunk, context - at);
    m.forward(std::vector<int32_t>(prompt.begin() + at, prompt.begin() + at + n), source, false);
  }
  const double prefill = std::chrono::duration<double>(clock::now() - p0).count();
  nlohmann::json rows = nlohmann::json::array();
  for (const int64_t batch : batches) {
    model::v4::StatePoolLimits limits;
    limits.max_sequences = batch;
    limits.entry_pages = batch * m.pages_for_tokens(context + steps + 1);
    model::v4::StatePool pool(m, limits);
    std::vector<model::v4::SequenceChunk> chunks;
    for (int64_t b = 0; b < batch; ++b) {
      model::v4::SequenceState* s = pool.acquire();
      if (!m.copy_state(source, *s)) fail("bench: no room to fork ", batch, " sequences of ", context, " tokens");
      chunks.push_back({{static_cast<int32_t>((b * 104729 + 1) % vocab)}, s, false});
    }
    std::vector<double> step_s;
    for (int64_t i = 0; i <= steps; ++i) {  // the first step is a warm-up
      for (auto& ch : chunks)
        if (!pool.reserve(*ch.state, 1)) fail("bench: the pool ran out of pages");
      const auto t0 = clock::now();
      const std::vector<Mat> out = m.forward_batch(chunks);
      const double dt = std::chrono::duration<double>(clock::now() - t0).count();
      if (i > 0) step_s.push_back(dt);
      for (size_t b = 0; b < chunks.size(); ++b) {
        const float* row = out[b].row(0);
        chunks[b].tokens = {static_cast<int32_t>(std::max_element(row, row + vocab) - row)};
      }
    }
    const double step = median(step_s);
    rows.push_back({{"context", context},
                    {"batch", batch},
                    {"steps", steps},
                    {"step_ms_median", 1000.0 * step},
                    {"tokens_per_s", static_cast<double>(batch) / step},
                    {"tokens_per_s_per_user", 1.0 / step}});
    std::fprintf(stderr, "context %lld batch %lld: %.3f ms/step, %.1f tokens/s\n", static_cast<long long>(context),
                 static_cast<long long>(batch), 1000.0 * step, static_cast<double>(batch) / step);
  }
  return {{"context", context}, {"prefill_seconds", prefill}, {"decode", rows}};
}

std::vector<int64_t> positive_list(const Args& args, const std::string& name, const std::string& fallback) {
  std::vector<int64_t> out;
  for (const int32_t v : parse_id_list(args.str(name, fallback), name)) {
    if (v < 1) fail("option --", name, ": expected positive integers, found ", v);
    out.push_back(v);
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  const Args args(argv, {"model", "device", "prompt-len", "decode-tokens", "repeats", "commit", "out", "batch", "context", "chunk"}, {"help"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::string dir = args.required("model");
  const int64_t prompt_len = args.integer("prompt-len", 512), decode = args.integer("decode-tokens", 32),
                repeats = args.integer("repeats", 3);
  if (prompt_len < 1) fail("option --prompt-len: expected ≥ 1, found ", prompt_len);
  if (decode < 0) fail("option --decode-tokens: expected ≥ 0, found ", decode);
  if (repeats < 1) fail("option --repeats: expected ≥ 1, found ", repeats);
  const model::v4::Device device = model::v4::parse_device(args.str("device", "cpu"));
  const model::v4::Model m = model::v4::load_model(dir, device);
  const model::ModelConfig& c = m.config();
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int64_t i = 0; i < prompt_len; ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 17) % c.vocab_size);

  using clock = std::chrono::steady_clock;
  std::vector<double> prefill_s, decode_s;
  for (int64_t r = 0; r <= repeats; ++r) {
    model::v4::SequenceState st = m.new_sequence(nullptr, prompt_len + decode);
    const auto t0 = clock::now();
    Mat logits = m.forward(prompt, st, false);
    const auto t1 = clock::now();
    for (int64_t i = 0; i < decode; ++i) {
      const float* row = logits.row(0);
      const auto next = static_cast<int32_t>(std::max_element(row, row + c.vocab_size) - row);
      logits = m.forward({next}, st, false);
    }
    const auto t2 = clock::now();
    if (r == 0) continue;  // warm-up
    prefill_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    decode_s.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  const double p = median(prefill_s), d = median(decode_s);
  nlohmann::json j = {
      {"benchmark", std::string(model::v4::device_name(device)) + "_forward"},
      {"device", device_description(device)},
      {"date", utc_now()},
      {"commit", args.str("commit", "unknown")},
      {"config",
       {{"model", std::filesystem::path(dir).filename().string()},
        {"num_hidden_layers", c.num_hidden_layers},
        {"hidden_size", c.hidden_size},
        {"num_attention_heads", c.num_attention_heads},
        {"head_dim", c.head_dim},
        {"n_routed_experts", c.n_routed_experts},
        {"num_experts_per_tok", c.num_experts_per_tok},
        {"vocab_size", c.vocab_size},
        {"prompt_len", prompt_len},
        {"decode_tokens", decode},
        {"repeats", repeats}}},
      {"prefill", {{"seconds_median", p}, {"tokens_per_s", static_cast<double>(prompt_len) / p}}},
      {"decode",
       {{"seconds_median", d},
        {"tokens_per_s", decode > 0 ? static_cast<double>(decode) / d : 0.0},
        {"ms_per_token", decode > 0 ? 1000.0 * d / static_cast<double>(decode) : 0.0}}},
  };
  if (args.has("batch")) {
    const std::vector<int64_t> batches = positive_list(args, "batch", "1");
    const std::vector<int64_t> contexts = positive_list(args, "context", std::to_string(prompt_len));
    const int64_t chunk = args.integer("chunk", 4096);
    if (chunk < 1) fail("option --chunk: expected ≥ 1, found ", chunk);
    if (decode < 1) fail("option --decode-tokens: --batch needs at least one decode step");
    j["batched_decode"] = nlohmann::json::array();
    for (const int64_t context : contexts) j["batched_decode"].push_back(batched_decode(m, context, chunk, batches, decode));
  }
  const std::string text = j.dump(2) + "\n";
  if (args.has("out")) {
    std::ofstream out(args.str("out"));
    if (!out) fail("option --out: cannot write '", args.str("out"), "'");
    out << text;
  }
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace strata::cli
