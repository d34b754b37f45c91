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
  --commit SHA         git commit to record (default: unknown)
  --out FILE           write the JSON here (default: print it)

example:
  strata model init --preset small --out /tmp/small
  strata bench --model /tmp/small --prompt-len 512 --decode-tokens 32 --commit $(git rev-parse HEAD) --out bench/results/cpu_small.json
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  const Args args(argv, {"model", "device", "prompt-len", "decode-tokens", "repeats", "commit", "out"}, {"help"});
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
