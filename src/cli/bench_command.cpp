// `strata bench`: prefill and decode throughput of one model (a checkpoint, or random weights of a preset's shape
// made in memory) on this machine, written as JSON (device, date, commit, config, medians over repeats after a
// warm-up); on the CUDA backend each step also gets its hardware floor (src/bench/step_floor.h).
#include <omp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/step_floor.h"
#include "cache/prefix_cache.h"
#include "cli/args.h"
#include "cli/backend_flags.h"
#include "cli/bench_cache.h"
#include "cli/bench_plots.h"
#include "cli/bench_replay.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/git_commit.h"
#include "core/error.h"
#include "model/model_family.h"
#include "model/state_pool.h"
#ifdef STRATA_WITH_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/roofline.h"
#endif

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata bench — prefill and decode tokens/s of a model on the CPU or CUDA backend.

The model is a checkpoint (--model DIR) or random weights of a preset's shape made in memory (--preset NAME; no
file is written, so real V4-Flash layers cost seconds, not a disk's worth of checkpoint). Each repeat starts a
fresh sequence, prefills --prompt-len tokens in one forward, then decodes --decode-tokens tokens greedily, one
forward each. One warm-up repeat is not counted; reported numbers are medians.

options:
  --model DIR          checkpoint directory
  --preset NAME        instead of --model: random weights of tiny, small or flash (V4-Flash's real layer shapes)
  --layers N           with --preset: number of layers (default: the preset's; the layer schedule repeats)
  --dtype bf16|fp8     with --preset: matrices as bf16, or e4m3 with 128×128 fp32 block scales (default bf16)
  --precision P        with --device cuda: bf16, fp32 or fp8 — fp8 keeps the checkpoint's FP8 matrices FP8 on
                       the device (default: fp8 for --dtype fp8, else bf16)
  --batch-invariant    with --device cuda: the batch-invariant kernels (docs/batch_invariance.md), to time
                       what the mode costs
  --seed S             with --preset: random seed (default 0)
  --device cpu|cuda    the backend (default cpu)
  --prompt-len N       prompt tokens (default 512)
  --decode-tokens N    decode steps after the prompt (default 32)
  --repeats N          timed repeats (default 3)
  --prefill LIST       also time prefills of these lengths (e.g. 1024,4096,16384,32768), each a fresh sequence
                       in chunks of --chunk (default: the whole prompt in one forward)
  --batch LIST         also time batched decode steps: for each context length, one sequence is prefilled
                       (in chunks of --chunk, default 4096) and forked into B sequences (B from LIST, e.g.
                       1,8,32,64), then --decode-tokens steps run all B in one forward each; reports step time,
                       tokens/s per device (B / step) and per user (1 / step). Decode tokens are pseudo-random,
                       not argmax, so sequences keep routing to different experts (with random weights greedy
                       decoding can send every sequence to the same token)
  --context LIST       context lengths for --batch (default: --prompt-len), e.g. 4096,32768
  --cache-ttft LIST    also time the first token of prompts of these lengths seen before (e.g. 32768) against
                       cold, through the engine's prefix cache: no cache, cold with the cache (which saves), a
                       hit from host memory, and a hit from the cache directory by a fresh cache after its files
                       were dropped from the page cache, and a replay-mode hit from host memory; with the
                       cache's save/restore costs and bandwidths and the bytes each mode stored
  --cache-dir DIR      the directory for --cache-ttft (emptied; default /tmp/strata-bench-cache)
  --chunk N            prefill chunk for --prefill, --batch contexts and --cache-ttft (default 4096 there)
  --cache-replay IDS   the prefix cache's replay mode against exact mode on a real text: IDS is a file of token
                       ids (comma-separated, as `strata chat-template --ids` prints them); prefixes of it of
                       --replay-lengths tokens are cached at their last block boundary, and the logits after a
                       replay of the last K tokens (--replay-tokens) are compared with a cold prefill's (largest
                       and mean |delta|, top-1 agreement, equal greedy tokens of a 32-token continuation); with the
                       bytes each mode stores (a block, a boundary's rows, whole prompts)
  --cache-storage      only the bytes part of --cache-replay (no text needed), at --replay-lengths
  --replay-lengths LIST  prompt lengths for --cache-replay / --cache-storage (default 512,1024,2048)
  --replay-tokens LIST   K values for --cache-replay (default 128,140,256,512; each ≥ the sliding window)
  --ceilings GBS,TFLOPS  the device's copy bandwidth (GB/s) and bf16 peak (TFLOP/s) for the floors, instead of
                       measuring them (cuda) — on any backend, e.g. to compare a CPU run with its datasheet
  --commit SHA         git commit to record (default: git rev-parse HEAD with "-dirty" when tracked files
                       differ, else "unknown")
  --out FILE           write the JSON here (default: print it), and the plots beside it: FILE_pareto.png (with
                       --batch: tokens/s per device against tokens/s per user, a curve per context) and
                       FILE_floor.png (on cuda or with --ceilings: measured time over the floor), drawn by gnuplot
  --plots on|off       draw those PNGs when --out is given (default on; without gnuplot a warning says so)

JSON: device {backend, cpu, threads, gpu; on cuda also copy_bandwidth_gbs (device-to-device copy, bytes read +
written per second), bf16_gemm_tflops (cuBLASLt 8192³), weight_bytes_per_param {layer_matrices,
embedding_and_head} (bytes per parameter as stored on the device)}, date, commit, config {model, source
checkpoint|random, preset/dtype/seed, weights_seconds (random weights made), model_seconds (model built, weights
uploaded), shapes, options}, prefill and decode (the single-sequence run),
prefill_lengths [{tokens, chunk, seconds_median, tokens_per_s, floor fields}], batched_decode [{context,
prefill_seconds, decode [{context, batch, steps, step_ms_median, tokens_per_s, tokens_per_s_per_user, floor
fields}]}]. Floor fields (cuda, or with --ceilings; per step for decode, per whole prompt for prefill):
  bytes_floor          bytes the step must read: non-routed weights once, the distinct routed experts it ran,
                       embedding rows, fp32 vectors, and per sequence the window keys and compressed entries read
  weight_bytes_floor, state_bytes_floor   the two parts of bytes_floor
  flops_floor          2 × parameters used per token × tokens + attention (QKᵀ, PV, indexer scores)
  routed_experts_mean  distinct routed experts per layer the step ran (mean over layers and steps)
  floor_seconds        max(bytes_floor / copy bandwidth, flops_floor / bf16 peak), summed over steps or chunks
  floor_bound          "memory" or "compute": which term set the floor
  measured_over_floor  measured time / floor_seconds (1 = at the hardware floor)

examples (from the repository root):
  strata bench --preset small --layers 2 --prompt-len 256 --decode-tokens 16
  strata model init --preset small --layers 2 --out /tmp/small
  strata bench --model /tmp/small --prompt-len 512 --decode-tokens 32 --commit $(git rev-parse HEAD) --out /tmp/cpu_small.json
  strata bench --preset flash --layers 10 --dtype fp8 --device cuda --prefill 1024,4096,16384 \
               --batch 1,8,32,64 --context 4096,32768 --decode-tokens 16 --commit $(git rev-parse HEAD)
)";

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<int64_t> positive_list(const Args& args, const std::string& name, const std::string& fallback) {
  std::vector<int64_t> out;
  for (const int32_t v : parse_id_list(args.str(name, fallback), name)) {
    if (v < 1) fail("option --", name, ": expected positive integers, found ", v);
    out.push_back(v);
  }
  return out;
}

// The device's measured ceilings: what a step's bytes and FLOPs are divided by. Absent on the CPU backend.
struct Ceilings {
  double bandwidth_gbs = 0, peak_tflops = 0;
};

// Given by --ceilings GBS,TFLOPS, or measured on the CUDA device before the model is loaded (the copy borrows
// ~4 GiB of device memory that the weights may need later).
std::optional<Ceilings> ceilings_for(const Args& args, model::Device device) {
  if (args.has("ceilings")) {
    const std::string text = args.str("ceilings");
    const size_t comma = text.find(',');
    Ceilings c;
    try {
      size_t used = 0;
      c.bandwidth_gbs = std::stod(text.substr(0, comma), &used);
      if (comma == std::string::npos || used != comma) throw std::invalid_argument(text);
      c.peak_tflops = std::stod(text.substr(comma + 1), &used);
      if (used != text.size() - comma - 1) throw std::invalid_argument(text);
    } catch (const std::exception&) {
      fail("option --ceilings: expected GB/s,TFLOP/s like 4000,700, found '", text, "'");
    }
    if (!(c.bandwidth_gbs > 0) || !(c.peak_tflops > 0))
      fail("option --ceilings: expected positive numbers, found '", text, "'");
    return c;
  }
  if (device != model::Device::Cuda) return std::nullopt;
#ifdef STRATA_WITH_CUDA
  // The measurement is the first CUDA call: without a GPU it would fail with a raw CUDA error and a source path. Say
  // it as generate and serve do (make_cuda_runner in backend/cuda/cuda_runner.cpp).
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0)
    fail("--device cuda: no usable CUDA device (", e != cudaSuccess ? cudaGetErrorString(e) : "none found", ")");
  Ceilings c{cuda::measure_copy_bandwidth_gbs(), cuda::measure_bf16_gemm_tflops()};
  std::fprintf(stderr, "device ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", c.bandwidth_gbs, c.peak_tflops);
  return c;
#else
  return std::nullopt;  // unreachable: parse_device refuses cuda in a build without it
#endif
}

// The floor of a run of steps, accumulated step by step.
struct FloorSum {
  bench::StepWork work;  // summed over steps
  double seconds = 0, memory_seconds = 0, compute_seconds = 0, routed_experts = 0;
  int64_t steps = 0;

  void add(const model::Model& m, const std::vector<bench::SequenceStep>& sequences, const Ceilings& c) {
    const std::vector<int64_t> routed = m.routed_experts_last_forward();
    const bench::StepWork w =
        bench::step_floor(m.config(), sequences, routed,
                          bench::device_weight_bytes(model::precision_name(m.precision())));
    work.weight_bytes += w.weight_bytes;
    work.state_bytes += w.state_bytes;
    work.flops += w.flops;
    seconds += bench::floor_seconds(w, c.bandwidth_gbs, c.peak_tflops);
    memory_seconds += w.bytes() / (c.bandwidth_gbs * 1e9);
    compute_seconds += w.flops / (c.peak_tflops * 1e12);
    for (const int64_t r : routed) routed_experts += static_cast<double>(r) / static_cast<double>(routed.size());
    ++steps;
  }

  // Per step (`per` = steps) or for the whole run (`per` = 1), next to the `measured` seconds of the same span.
  void write(nlohmann::json& row, double per, double measured) const {
    row["bytes_floor"] = work.bytes() / per;
    row["weight_bytes_floor"] = work.weight_bytes / per;
    row["state_bytes_floor"] = work.state_bytes / per;
    row["flops_floor"] = work.flops / per;
    row["routed_experts_mean"] = steps > 0 ? routed_experts / static_cast<double>(steps) : 0.0;
    row["floor_seconds"] = seconds / per;
    row["floor_bound"] = memory_seconds >= compute_seconds ? "memory" : "compute";
    row["measured_over_floor"] = measured / (seconds / per);
  }
};

std::vector<int32_t> prompt_tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> prompt(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 17) % vocab);
  return prompt;
}

// Prefill of `tokens` tokens into a fresh sequence, `chunk` tokens per forward; the median of `repeats` after a
// warm-up. The floor sums the floors of the chunks (each chunk is a step that reads the weights again).
nlohmann::json timed_prefill(const model::Model& m, int64_t tokens, int64_t chunk, int64_t repeats,
                             const std::optional<Ceilings>& ceilings) {
  const std::vector<int32_t> prompt = prompt_tokens(tokens, m.config().vocab_size);
  std::vector<double> seconds;
  FloorSum floor;
  for (int64_t r = 0; r <= repeats; ++r) {
    model::SequenceState s = m.new_sequence(nullptr, tokens + 1);
    double elapsed = 0;
    floor = {};
    for (int64_t at = 0; at < tokens; at += chunk) {
      const int64_t n = std::min(chunk, tokens - at);
      const std::vector<int32_t> part(prompt.begin() + at, prompt.begin() + at + n);
      const auto t0 = clock::now();
      m.forward(part, s, false);
      elapsed += seconds_since(t0);
      if (ceilings) floor.add(m, {{at, n}}, *ceilings);  // routing of the chunk just run, outside the timing
    }
    if (r > 0) seconds.push_back(elapsed);
  }
  const double t = median(seconds);
  nlohmann::json row = {{"tokens", tokens},
                        {"chunk", chunk},
                        {"seconds_median", t},
                        {"tokens_per_s", static_cast<double>(tokens) / t}};
  if (ceilings) floor.write(row, 1.0, t);
  std::fprintf(stderr, "prefill %lld tokens (chunk %lld): %.3f s, %.1f tokens/s", static_cast<long long>(tokens),
               static_cast<long long>(chunk), t, static_cast<double>(tokens) / t);
  if (ceilings) std::fprintf(stderr, ", %.2f× the floor", row["measured_over_floor"].get<double>());
  std::fputc('\n', stderr);
  return row;
}

// Decode steps of `batch` sequences at `context` tokens each: one prefilled sequence is forked into a pool (the
// same state in every slot), then every step runs all of them in one run_step with greedy picks on the device.
nlohmann::json batched_decode(const model::Model& m, int64_t context, int64_t chunk,
                              const std::vector<int64_t>& batches, int64_t steps,
                              const std::optional<Ceilings>& ceilings) {
  const int64_t vocab = m.config().vocab_size;
  model::SequenceState source = m.new_sequence(nullptr, context + 1);  // forks grow in the pool
  const std::vector<int32_t> prompt = prompt_tokens(context, vocab);
  const auto p0 = clock::now();
  for (int64_t at = 0; at < context; at += chunk) {
    const int64_t n = std::min(chunk, context - at);
    m.forward(std::vector<int32_t>(prompt.begin() + at, prompt.begin() + at + n), source, false);
  }
  const double prefill = seconds_since(p0);
  nlohmann::json rows = nlohmann::json::array();
  for (const int64_t batch : batches) {
    // A point that does not fit (device memory for the forks' state) is recorded, not fatal: the points already
    // measured are kept, and larger batches at this context are skipped.
    try {
      model::StatePoolLimits limits;
      limits.max_sequences = batch;
      limits.blocks = batch * m.blocks_for_tokens(context + steps + 3);
      model::StatePool pool(m, limits);
      std::vector<model::SequenceChunk> chunks;
      for (int64_t b = 0; b < batch; ++b) {
        model::SequenceState* s = pool.acquire();
        if (!m.copy_state(source, *s)) fail("bench: no room to fork ", batch, " sequences of ", context, " tokens");
        chunks.push_back({{static_cast<int32_t>((b * 104729 + 1) % vocab)}, s, false});
      }
      // Greedy decode as the engine runs it: the pick is made where the logits are, only ids come home.
      model::LogitsStage greedy;
      for (int64_t b = 0; b < batch; ++b) greedy.rows.push_back({b, false, {}, model::TokenPick{}, nullptr});
      std::vector<double> step_s;
      FloorSum floor;
      // The first two steps are warm-ups: on a GPU the first runs a new shape eagerly, the second records it (CUDA
      // graphs), and the timed ones replay it, as a serving process's steady state does.
      constexpr int64_t kWarmups = 2;
      for (int64_t i = 0; i < steps + kWarmups; ++i) {
        for (auto& ch : chunks)
          if (!pool.reserve(*ch.state, 1)) fail("bench: the pool ran out of token blocks");
        const auto t0 = clock::now();
        m.run_step(chunks, greedy);
        const double dt = seconds_since(t0);
        if (i >= kWarmups) {
          step_s.push_back(dt);
          if (ceilings) floor.add(m, std::vector<bench::SequenceStep>(chunks.size(), {context + i, 1}), *ceilings);
        }
        // Pseudo-random next tokens, different per sequence and step: realistic routing whatever the weights.
        for (size_t b = 0; b < chunks.size(); ++b)
          chunks[b].tokens = {static_cast<int32_t>((static_cast<int64_t>(b) * 104729 + (i + 1) * 7919 + 1) % vocab)};
      }
      const double step = median(step_s);
      nlohmann::json row = {{"context", context},
                            {"batch", batch},
                            {"steps", steps},
                            {"step_ms_median", 1000.0 * step},
                            {"tokens_per_s", static_cast<double>(batch) / step},
                            {"tokens_per_s_per_user", 1.0 / step}};
      if (ceilings) floor.write(row, static_cast<double>(floor.steps), step);
      std::fprintf(stderr, "context %lld batch %lld: %.3f ms/step, %.1f tokens/s", static_cast<long long>(context),
                   static_cast<long long>(batch), 1000.0 * step, static_cast<double>(batch) / step);
      if (ceilings) std::fprintf(stderr, ", %.2f× the floor", row["measured_over_floor"].get<double>());
      std::fputc('\n', stderr);
      rows.push_back(row);
} catch (const std::exception& e) {
      std::fprintf(stderr, "context %lld batch %lld: %s (larger batches skipped)\n", static_cast<long long>(context),
                   static_cast<long long>(batch), e.what());
      rows.push_back({{"context", context}, {"batch", batch}, {"error", e.what()}});
      break;
    }
  }
  return {{"context", context}, {"prefill_seconds", prefill}, {"decode", rows}};
}

// The model to time and how it was made: a checkpoint directory, or a preset's random weights in memory.
struct LoadedModel {
  std::unique_ptr<model::Model> model;
  nlohmann::json description;
};

LoadedModel load(const Args& args, const BackendFlags& backend) {
  const bool from_dir = args.has("model"), from_preset = args.has("preset");
  if (!from_dir && !from_preset)
    fail("bench: expected --model DIR (a checkpoint) or --preset NAME (random weights: tiny, small or flash), "
         "found neither");
  if (from_dir && from_preset)
    fail("bench: --model and --preset are alternatives (a checkpoint, or random weights of a preset's shape); "
         "found both");
  if (from_dir) {
    for (const char* option : {"layers", "dtype", "seed"})
      if (args.has(option))
        fail("bench: --", option, " shapes random weights and needs --preset; found it with --model");
    const std::string dir = checked_model_dir(args.str("model"));
    const auto t0 = clock::now();
    std::unique_ptr<model::Model> m = model::open_checkpoint(dir, backend.device, backend.precision, backend.cuda);
    return {std::move(m),
            {{"model", std::filesystem::path(dir).filename().string()},
             {"source", "checkpoint"},
             {"model_seconds", seconds_since(t0)}}};
  }
  const std::string preset = args.str("preset"), dtype = args.str("dtype", "bf16");
  if (dtype != "bf16" && dtype != "fp8") fail("option --dtype: expected bf16 or fp8, found '", dtype, "'");
  const int64_t seed = args.integer("seed", 0);
  if (seed < 0) fail("option --seed: expected a non-negative integer, found ", seed);
  const DType matrix_dtype = dtype == "fp8" ? DType::F8_E4M3 : DType::BF16;
  model::RandomModel r = model::random_model(model::preset_config(preset, args.integer("layers", 0)),
                                             static_cast<uint64_t>(seed), matrix_dtype, backend.device,
                                             backend.precision, backend.cuda);
  const double made = r.weights_seconds, built = r.model_seconds;
  std::fprintf(stderr, "random weights: %s, %lld layers, %s, in %.2f s on %d threads\n", preset.c_str(),
               static_cast<long long>(r.config.num_hidden_layers), dtype.c_str(), made, omp_get_max_threads());
  std::fprintf(stderr, "model on %s in %.2f s\n", model::device_name(backend.device), built);
  std::unique_ptr<model::Model> m = std::move(r.model);
  return {std::move(m),
          {{"model", "random " + preset},
           {"source", "random"},
           {"preset", preset},
           {"dtype", dtype},
           {"seed", seed},
           {"weights_seconds", made},
           {"model_seconds", built}}};
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  const Args args(argv,
                  {"model", "preset", "layers", "dtype", "seed", "device", "prompt-len", "decode-tokens", "repeats",
                   "commit", "out", "plots", "prefill", "batch", "context", "chunk", "ceilings", "precision", "cuda-graphs",
                   "cache-ttft", "cache-dir", "cache-replay", "replay-lengths", "replay-tokens"},
                  {"help", "cuda-op-times", "cache-storage", "batch-invariant"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const int64_t prompt_len = args.integer("prompt-len", 512), decode = args.integer("decode-tokens", 32),
                repeats = args.integer("repeats", 3);
  if (prompt_len < 1) fail("option --prompt-len: expected ≥ 1, found ", prompt_len);
  if (decode < 0) fail("option --decode-tokens: expected ≥ 0, found ", decode);
  if (repeats < 1) fail("option --repeats: expected ≥ 1, found ", repeats);
  const std::vector<int64_t> prefill_lengths =
      args.has("prefill") ? positive_list(args, "prefill", "") : std::vector<int64_t>{};
  std::vector<int64_t> batches, contexts;
  if (args.has("batch")) {
    batches = positive_list(args, "batch", "1");
    contexts = positive_list(args, "context", std::to_string(prompt_len));
    if (decode < 1) fail("option --decode-tokens: --batch needs at least one decode step");
  }
  if (args.has("chunk") && args.integer("chunk", 1) < 1)
    fail("option --chunk: expected ≥ 1, found ", args.integer("chunk", 1));
  const std::string plots_option = args.str("plots", "on");
  if (plots_option != "on" && plots_option != "off") fail("option --plots: expected on or off, found '", plots_option, "'");
  if (args.has("plots") && !args.has("out")) fail("option --plots: the plots go beside the JSON of --out, which is missing");
  const bool plots = plots_option == "on";
  // FP8 random weights stay FP8 on the GPU unless asked otherwise: that is what --dtype fp8 benchmarks.
  const bool fp8_on_gpu = args.str("dtype", "bf16") == "fp8" && args.str("device", "cpu") == "cuda";
  const BackendFlags backend = read_backend_flags(args, fp8_on_gpu ? "fp8" : "bf16");
  const model::Device device = backend.device;
  const std::optional<Ceilings> ceilings = ceilings_for(args, device);
  LoadedModel loaded = load(args, backend);
  const model::Model& m = *loaded.model;
  const model::ModelConfig& c = m.config();
  const std::vector<int32_t> prompt = prompt_tokens(prompt_len, c.vocab_size);

  std::vector<double> prefill_s, decode_s;
  for (int64_t r = 0; r <= repeats; ++r) {
    model::SequenceState st = m.new_sequence(nullptr, prompt_len + decode);
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
  nlohmann::json device_json = {{"backend", model::device_name(device)},
                                {"cpu", cpu_model_name()},
                                {"threads", omp_get_max_threads()}};
  if (device == model::Device::Cuda) device_json["gpu"] = model::cuda_device_name();
  if (ceilings) {
    device_json["ceilings"] = args.has("ceilings") ? "given" : "measured";
    device_json["copy_bandwidth_gbs"] = ceilings->bandwidth_gbs;
    device_json["bf16_gemm_tflops"] = ceilings->peak_tflops;
    const bench::WeightBytes wb = bench::device_weight_bytes(model::precision_name(m.precision()));
    device_json["weight_bytes_per_param"] = {{"layer_matrices", wb.matrix}, {"embedding_and_head", wb.ends}};
  }
  nlohmann::json config = loaded.description;
  config.update(nlohmann::json{{"num_hidden_layers", c.num_hidden_layers},
                 {"hidden_size", c.hidden_size},
                 {"num_attention_heads", c.num_attention_heads},
                 {"head_dim", c.head_dim},
                 {"n_routed_experts", c.n_routed_experts},
                 {"num_experts_per_tok", c.num_experts_per_tok},
                 {"moe_intermediate_size", c.moe_intermediate_size},
                 {"vocab_size", c.vocab_size},
                 {"precision", model::precision_name(m.precision())},
                 {"prompt_len", prompt_len},
                 {"decode_tokens", decode},
                 {"repeats", repeats},
                 {"batched_decode_sampling", "greedy: argmax in the backend, ids home"}});
  if (device == model::Device::Cuda) {
    config["cuda_graphs"] = backend.cuda.graphs;
    config["batch_invariant"] = backend.cuda.batch_invariant;
  }
  if (args.has("chunk")) config["chunk"] = args.integer("chunk", 0);
  nlohmann::json j = {
      {"benchmark", std::string(model::device_name(device)) + "_forward"},
      {"device", device_json},
      {"date", utc_now()},
      {"commit", args.has("commit") ? args.str("commit") : git_commit()},
      {"config", config},
      {"prefill", {{"seconds_median", p}, {"tokens_per_s", static_cast<double>(prompt_len) / p}}},
      {"decode",
       {{"seconds_median", d},
        {"tokens_per_s", decode > 0 ? static_cast<double>(decode) / d : 0.0},
        {"ms_per_token", decode > 0 ? 1000.0 * d / static_cast<double>(decode) : 0.0}}},
  };
  if (!prefill_lengths.empty()) {
    j["prefill_lengths"] = nlohmann::json::array();
    for (const int64_t n : prefill_lengths)
      j["prefill_lengths"].push_back(timed_prefill(m, n, std::min(n, args.integer("chunk", n)), repeats, ceilings));
  }
  if (!batches.empty()) {
    const int64_t chunk = args.integer("chunk", 4096);
    j["batched_decode"] = nlohmann::json::array();
    for (const int64_t context : contexts)
      try {  // a context whose prefill does not fit is recorded like a batch that does not
        j["batched_decode"].push_back(batched_decode(m, context, chunk, batches, decode, ceilings));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "context %lld: %s\n", static_cast<long long>(context), e.what());
        j["batched_decode"].push_back({{"context", context}, {"error", e.what()}, {"decode", nlohmann::json::array()}});
      }
  }
  if (args.has("cache-ttft"))
    j["cache_ttft"] = cache_ttft(m, positive_list(args, "cache-ttft", ""), args.integer("chunk", 4096),
                                 args.str("cache-dir", "/tmp/strata-bench-cache"), repeats);
  if (args.has("cache-replay") || args.has("cache-storage")) {
    std::vector<int32_t> ids;
    if (args.has("cache-replay")) {
      std::ifstream in(args.str("cache-replay"));
      if (!in) fail("option --cache-replay: cannot read '", args.str("cache-replay"), "'");
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
      ids = parse_id_list(text, "cache-replay");
    }
    j["cache_replay"] = cache_replay(m, ids, positive_list(args, "replay-lengths", "512,1024,2048"),
                                     positive_list(args, "replay-tokens", "128,140,256,512"), 32,
                                     cache::CacheConfig{}.checkpoint_every_blocks);
  }
  if (device == model::Device::Cuda) j["cuda_graph_replays"] = m.steps_replayed();
  const std::string text = j.dump(2) + "\n";
  if (args.has("out")) {
    {
      std::ofstream out(args.str("out"));
      out << text;
      if (!out) fail("option --out: cannot write '", args.str("out"), "'");
    }
    if (plots) try {
        for (const std::string& png : draw_bench_plots(j, args.str("out"))) std::fprintf(stderr, "plot: %s\n", png.c_str());
      } catch (const Error& e) {
        // The run is done and its JSON written: a missing or failing gnuplot costs only the pictures.
        std::fprintf(stderr, "strata bench: warning: no plots: %s\n", e.what());
      }
  }
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace strata::cli
