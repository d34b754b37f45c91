// `strata generate`: prefill a prompt (optionally in chunks), decode greedily or by sampling, report speed, and
// optionally dump every logit row for comparison with a reference implementation. With --input, the offline
// batch mode: a JSONL file of OpenAI requests through the serving engine (cli/offline_batch.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/backend_flags.h"
#include "cli/engine_options.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/generate_prompt.h"
#ifdef STRATA_WITH_SERVER
#include "cli/offline_batch.h"
#include "cli/offline_progress.h"
#endif
#include "core/error.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/model_family.h"
#include "model/safetensors.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata generate — run token ids through a DeepSeek-V4 checkpoint on the CPU or a GPU.

options:
  --model DIR          checkpoint directory (config.json + safetensors); default: the demo model, models/demo/
  --device cpu|cuda    the backend (default cpu)
  --precision P        with --device cuda: bf16 (default), fp32, or fp8 (the checkpoint's FP8 matrices stay FP8)
                       on the CPU: official (DeepSeek's own numerics; docs/official_numerics.md)
  --cuda-graphs on|off with --device cuda: replay decode steps as CUDA graphs (default on)
  --cuda-op-times      with --device cuda: time every backend op with CUDA events, a table at exit
  --batch-invariant    with --device cuda: a sequence's numbers do not depend on the rest of the batch or
                       the prefill's chunks (docs/batch_invariance.md; the CPU backend always is)
  --prompt-ids IDS     comma-separated prompt token ids, e.g. 5,6,7
  --prompt TEXT        a text prompt (BOS per the tokenizer config; special-token spellings stay plain text
                       unless --parse-special); prints the generated text
  --chat FILE.json     an OpenAI chat-completions request body ("-" reads stdin), checked as `strata serve`
                       checks one (every field it takes: messages, tools, response_format, temperature, stop,
                       ...; n must be 1, stream and logprobs absent or false), rendered with the DeepSeek-V4
                       chat encoding; prints {"reasoning_content", "content", "tool_calls"} as JSON
  --parse-special      with --prompt: special-token spellings become the special tokens
  --max-tokens N       tokens to generate (default: a --chat request's max_tokens, else the rest of the context
                       for --chat, else 16); more than the context leaves is refused
  --max-model-len N    the context: prompt + generated tokens (default: min(8192, max_position_embeddings))
  --temperature T      0 = greedy (default; a --chat request's own temperature otherwise); > 0 samples from
                       softmax(logits / T). The sampling options override a --chat request's fields
  --top-p P, --top-k K, --min-p P, --repetition-penalty R, --presence-penalty P, --frequency-penalty F
                       the usual sampling controls (OpenAI / vLLM semantics)
  --seed S             sampling seed (default 0): the same seed gives the same tokens
  --chunk N            prefill the prompt in chunks of N tokens (default: all at once); logits are the same
  --ignore-eos         keep generating past the config's eos_token_id
  --dump-logits FILE   write a safetensors file: prompt_logits [L, V] (every prompt position), gen_logits [N, V]
                       (row i = the logits gen_tokens[i] was chosen from) in F32, gen_tokens [N] in I64
  --dump-hidden FILE   write the prompt's residual streams after every layer, hidden.L [L, hc·hidden] (debugging)
  --speculative-tokens N, --speculative-min-prob P
                       speculative decoding with the checkpoint's MTP layer (see `strata serve --help`); the
                       speculation counts go to stderr (not with --dump-logits: a capture does not speculate)

With --prompt-ids, prints the generated ids (comma-separated; on a terminal as they are made) on stdout; timings
go to stderr. Exactly one of
--prompt-ids, --prompt and --chat is required; the text modes need tokenizer.json in the model directory.

Offline batch mode (strata generate --input FILE --output FILE --help for its options): every line of a JSONL
file is an OpenAI request, run through the serving engine with continuous batching.

example (from the repository root):
  strata model init --preset tiny --out /tmp/tiny
  strata generate --model /tmp/tiny --prompt-ids 5,6,7 --max-tokens 8 --temperature 0
  strata model init --preset tiny --mtp 1 --out /tmp/tiny-mtp
  strata generate --model /tmp/tiny-mtp --prompt-ids 5,6,7 --max-tokens 32 --temperature 0 --speculative-tokens 3
  echo '{"messages": [{"role": "user", "content": "What is 23 plus 45?"}]}' | strata generate --chat -
  strata generate --prompt "The capital of France is" --max-tokens 8
)";

constexpr const char* kOfflineHelp = R"(strata generate --input — offline batch inference: a JSONL file of OpenAI requests through the same
engine as `strata serve` (continuous batching, chunked prefill), one JSON result per request, in input order.

options:
  --model DIR                checkpoint directory with tokenizer.json + tokenizer_config.json (default: the
                             demo model, models/demo/ of the repository)
  --device cpu|cuda          the backend (default cpu)
  --precision P              with --device cuda: bf16 (default), fp32, or fp8 (the checkpoint's FP8 matrices stay FP8)
                             on the CPU: official (DeepSeek's own numerics; docs/official_numerics.md)
  --cuda-graphs on|off       with --device cuda: replay decode steps as CUDA graphs (default on)
  --cuda-op-times            with --device cuda: time every backend op with CUDA events, a table at exit
  --batch-invariant          with --device cuda: a sequence's numbers do not depend on the rest of the batch
                             or the prefill's chunks (docs/batch_invariance.md; the CPU backend always is)
  --input FILE               requests, one JSON object a line ("-" reads stdin):
                               a request body: chat if it has "messages", completions ("prompt") otherwise, with
                               an optional "custom_id" (or "id"), a string or number, carried to the result:
                                 {"custom_id": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}
                                 {"id": 2, "prompt": [5, 6, 7], "max_tokens": 8, "temperature": 0, "n": 2}
                               or an OpenAI batch-API line, its url naming the endpoint:
                                 {"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {...}}
                             Bodies take every field the server takes (see strata serve --help); "stream" must be
                             false or absent. Blank lines are skipped.
  --output FILE              results, one JSON object per request, in input order ("-" writes stdout):
                               {"line": 1, "custom_id": "a", "response": {"status_code": 200, "body": {...}},
                                "error": null}
                             body is the JSON a non-streamed server response carries. A line the server would
                             refuse gets its status and OpenAI error instead, and the batch goes on:
                               {"line": 3, "custom_id": null, "response": {"status_code": 400, "body": {"error":
                                {...}}}, "error": {"message": "top_p: ...", "type": "invalid_request_error",
                                "param": "top_p", "code": null}}
  --max-num-seqs N           sequences in one engine step (default 256); each choice of a request is one sequence
  --max-num-batched-tokens N tokens per engine step, the prefill chunk budget (default 2048)
  --max-model-len N          prompt + generated tokens per sequence (default: min(8192, max_position_embeddings))
  --state-memory BYTES       memory for per-sequence state, e.g. 2GiB (default: a slot per sequence plus 256
                             token blocks of compressed entries, 128 tokens each)
  --max-n N                  largest n accepted (default 16)
  --grammar-compile-timeout S a schema, regex or grammar that takes longer to compile fails its line (default 10)
  --served-model-name NAME   the name a request's "model" must match, shown in results (default: basename of DIR)
  --progress-interval S      without a terminal on stderr: seconds between progress lines (default 5)
  --summary FILE.json        also write the summary as JSON (throughput, engine steps, time outside the model)

Progress goes to stderr (a bar on a terminal, plain lines otherwise), then a summary: requests, prompt and
generated tokens, wall time, tokens/s. The exit code is 0 even when some lines failed (their records say why).

example (from the repository root; scripts/setup.sh fetches .deps/tokenizer-deepseek_v3):
  strata model init --preset tiny --tokenizer-from .deps/tokenizer-deepseek_v3 --out /tmp/tinytok
  printf '%s\n' '{"custom_id":"a","prompt":"Hello","max_tokens":8,"temperature":0}' \
                '{"custom_id":"b","messages":[{"role":"user","content":"Hi"}],"max_tokens":8}' > /tmp/requests.jsonl
  strata generate --model /tmp/tinytok --input /tmp/requests.jsonl --output /tmp/results.jsonl
)";

#ifdef STRATA_WITH_SERVER

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) fail("option --input: cannot read '", path, "'");
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  if (in.bad()) fail("option --input: error while reading '", path, "'");
  return lines;
}

int offline_generate(const std::vector<std::string>& argv) {
  const Args args(argv,
                  with_speculative_options(with_cache_options(
                      {"model", "device", "precision", "cuda-graphs", "input", "output", "max-num-seqs",
                       "max-num-batched-tokens", "max-model-len", "state-memory", "max-n", "served-model-name",
                       "progress-interval", "summary", "grammar-compile-timeout"})),
                  {"help", "cuda-op-times", "batch-invariant"});
  if (args.has("help")) {
    std::fputs(kOfflineHelp, stdout);
    std::fputs("\nprefix cache options (results carry usage.prompt_tokens_details.cached_tokens):\n", stdout);
    std::fputs(kCacheOptionsHelp, stdout);
    std::fputs("\nspeculative decoding options:\n", stdout);
    std::fputs(kSpeculativeOptionsHelp, stdout);
    return 0;
  }
  const std::string input = args.required("input"), output = args.required("output");
  const EngineOptions engine_options = read_engine_options(args, 256);
  const int64_t max_n = positive_integer(args, "max-n", 16);
  const double interval = args.number("progress-interval", 5.0);
  if (!(interval > 0)) fail("option --progress-interval: expected seconds > 0, found ", interval);
  const double grammar_timeout_s = args.number("grammar-compile-timeout", 10.0);
  if (!(grammar_timeout_s > 0))
    fail("option --grammar-compile-timeout: expected seconds > 0, found ", grammar_timeout_s);
  const std::string dir = model_dir_or_default(args);  // after the options: a bad flag is named before the model

  const std::vector<std::string> lines = read_lines(input);
  const text::Tokenizer tokenizer = text::Tokenizer::load(dir);
  const BackendFlags backend = read_backend_flags(args);
  const std::unique_ptr<model::Model> loaded =
      model::open_checkpoint(dir, backend.device, backend.precision, backend.cuda, engine_options.max_rollback());
  const model::Model& model = *loaded;
  const model::ModelConfig& mc = model.config();
  if (tokenizer.vocab_size() > mc.vocab_size)
    fail("--model ", dir, ": the tokenizer has ids up to ", tokenizer.vocab_size() - 1, " but the model's vocab_size is ",
         mc.vocab_size);

  OfflineSettings settings;
  settings.engine = make_engine_config(engine_options, args, model);
  const engine::EngineConfig& ec = settings.engine;
  settings.limits.max_model_len = ec.max_model_len;
  settings.limits.protocol.max_n = max_n;
  settings.limits.served_model_name = args.str("served-model-name", default_served_model_name(dir));
  settings.limits.grammar_limits.max_compile_time =
      std::chrono::milliseconds(static_cast<int64_t>(grammar_timeout_s * 1000));

  std::ofstream file;
  if (output != "-") {
    file.open(output, std::ios::binary | std::ios::trunc);
    if (!file) fail("option --output: cannot write '", output, "'");
  }
  std::ostream& out = output == "-" ? std::cout : file;
  int64_t total = 0;
  for (const std::string& l : lines) total += l.find_first_not_of(" \t\r\n") != std::string::npos;
  OfflineProgress progress(stderr, ::isatty(STDERR_FILENO) != 0, total, interval);
  const OfflineSummary summary = run_offline_batch(model, tokenizer, settings, lines, out, &progress);
  if (!out) fail("option --output: error while writing '", output, "'");
  progress.finish(summary);
  if (args.has("summary")) {
    std::ofstream json_out(args.str("summary"));
    json_out << summary_json(summary).dump(2) << "\n";
    if (!json_out) fail("option --summary: cannot write '", args.str("summary"), "'");
  }
  return 0;
}
#endif

// Options of one prompt that an offline batch (--input) takes from each request instead.
void refuse_single_prompt_options(const std::vector<std::string>& argv) {
  static const char* const kSinglePrompt[] = {"prompt-ids", "prompt", "chat", "max-tokens", "temperature", "top-p",
                                              "top-k", "min-p", "repetition-penalty", "presence-penalty",
                                              "frequency-penalty", "seed", "chunk", "dump-logits", "dump-hidden",
                                              "ignore-eos", "parse-special"};
  for (const std::string& a : argv)
    for (const char* option : kSinglePrompt) {
      const std::string flag = std::string("--") + option;
      if (a == flag || a.rfind(flag + "=", 0) == 0)
        fail("options --input and ", flag, " do not go together: --input runs a file of requests, each with its own "
             "prompt and settings; ", flag, " is for one prompt (strata generate --help)");
    }
}

}  // namespace

int generate_command(const std::vector<std::string>& argv) {
  for (const std::string& a : argv)
    if (a == "--input" || a.rfind("--input=", 0) == 0) {
      refuse_single_prompt_options(argv);
#ifdef STRATA_WITH_SERVER
      return offline_generate(argv);
#else
      fail("option --input: offline batch mode needs the server's OpenAI layer, and this build has none (Boost.Beast, "
           "Debian libboost-dev, was missing)");
#endif
    }
  const Args args(argv, with_speculative_options({"model", "device", "precision", "cuda-graphs", "prompt-ids", "prompt", "chat",
                         "max-tokens", "max-model-len", "temperature", "top-p", "top-k", "min-p", "repetition-penalty",
                         "presence-penalty", "frequency-penalty", "seed", "chunk", "dump-logits", "dump-hidden"}),
                  {"help", "ignore-eos", "parse-special", "cuda-op-times", "batch-invariant"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const int given = args.has("prompt-ids") + args.has("prompt") + args.has("chat");
  if (given != 1) fail("give exactly one of --prompt-ids, --prompt and --chat (see --help)");
  const BackendFlags backend = read_backend_flags(args);
  const std::string dir = model_dir_or_default(args);
  // The config first (cheap), so a prompt that cannot fit fails before the weights load.
  const model::ModelConfig mc = model::load_config(dir);
  const int64_t context = args.integer("max-model-len", std::min<int64_t>(8192, mc.max_position_embeddings));
  if (context < 2 || context > mc.max_position_embeddings)
    fail("option --max-model-len: expected 2..", mc.max_position_embeddings,
         " (the model's max_position_embeddings), found ", context);
  const Prompt input = read_prompt(args, dir, mc, context);
  const std::vector<int32_t>& prompt = input.ids;
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  if (n_prompt >= context)
    fail("option --", input.option, ": the prompt has ", n_prompt, " tokens, which leaves no room in the context of ",
         context, " tokens (--max-model-len; the model's max_position_embeddings is ", mc.max_position_embeddings, ")");
  // A --chat request's own settings, else greedy; each option given overrides.
  engine::SamplingParams sampling = input.chat_sampling.value_or([] {
    engine::SamplingParams greedy;
    greedy.temperature = 0.0;
    return greedy;
  }());
  // --max-tokens wins; else a --chat request's max_tokens (its own, or the rest of the context); else 16.
  sampling.max_tokens = args.has("max-tokens") ? args.integer("max-tokens", 16)
                                               : input.max_tokens.value_or(std::min<int64_t>(16, context - n_prompt));
  if (sampling.max_tokens < 0) fail("option --max-tokens: expected a count ≥ 0, found ", sampling.max_tokens);
  if (n_prompt + sampling.max_tokens > context)
    fail("option --max-tokens: the prompt has ", n_prompt, " tokens and the context is ", context,
         " tokens (--max-model-len; the model's max_position_embeddings is ", mc.max_position_embeddings,
         "), so at most ", context - n_prompt, " can be generated; found ", sampling.max_tokens);
  sampling.temperature = args.number("temperature", sampling.temperature);
  sampling.top_p = args.number("top-p", sampling.top_p);
  sampling.top_k = args.integer("top-k", sampling.top_k);
  sampling.min_p = args.number("min-p", sampling.min_p);
  sampling.repetition_penalty = args.number("repetition-penalty", sampling.repetition_penalty);
  sampling.presence_penalty = args.number("presence-penalty", sampling.presence_penalty);
  sampling.frequency_penalty = args.number("frequency-penalty", sampling.frequency_penalty);
  sampling.stop.clear();  // stop strings are matched on the text here (ReplyText), not by the engine
  if (args.has("seed") || !sampling.seed) {
    const int64_t seed = args.integer("seed", 0);
    if (seed < 0) fail("option --seed: expected a non-negative integer, found ", seed);
    sampling.seed = static_cast<uint64_t>(seed);
  }
  const int64_t chunk = args.integer("chunk", 0);
  if (chunk < 0) fail("option --chunk: expected a positive chunk size, found ", chunk);

  const engine::SpeculativeConfig speculative = read_speculative_options(args);
  const std::unique_ptr<model::Model> loaded = model::open_checkpoint(dir, backend.device, backend.precision, backend.cuda,
                                                                      std::max<int64_t>(1, speculative.tokens));
  const model::Model& m = *loaded;
  const int64_t vocab = m.config().vocab_size;
  try {
    sampling.validate(vocab);
  } catch (const Error& e) {
    fail("sampling option ", e.what());  // names the parameter, e.g. "top_p: expected a number in (0, 1]…"
  }
  for (int32_t id : prompt)
    if (id >= vocab)
      fail("option --", input.option, ": token id ", id, " is outside the model's vocabulary [0, ", vocab, ")");
  const bool dump = args.has("dump-logits");
  // The prompt runs in the step that picks the first token: without one, nothing runs and there is nothing to dump.
  if ((dump || args.has("dump-hidden")) && sampling.max_tokens < 1)
    fail("options --dump-logits and --dump-hidden need --max-tokens ≥ 1 (the prompt runs with the first token's step)");
  sampling.ignore_eos = sampling.ignore_eos || args.has("ignore-eos");  // a --chat request may ask it too
  sampling.capture_logits = dump;

  // The same engine as the server, sized for this one sequence: its prompt in chunks of --chunk tokens (all at once
  // by default), then one token a step.
  engine::EngineConfig ec;
  const int64_t total = n_prompt + std::max<int64_t>(sampling.max_tokens, 1);
  ec.max_model_len = total;
  ec.scheduler.max_num_seqs = 1;
  ec.scheduler.max_num_batched_tokens = chunk > 0 ? chunk : std::max<int64_t>(n_prompt, 1);
  ec.pool.max_sequences = 1;
  ec.pool.blocks = m.blocks_for_tokens(total);
  ec.speculative = speculative;
  std::vector<std::vector<float>> hidden(static_cast<size_t>(m.config().num_hidden_layers));
  int64_t hidden_rows = 0;  // rows of the steps observed so far; the first n_prompt are the prompt's
  if (args.has("dump-hidden"))
    ec.observe = [&](int64_t layer, const Mat& streams) {
      const int64_t take = std::clamp<int64_t>(n_prompt - hidden_rows, 0, streams.rows);
      hidden[layer].insert(hidden[layer].end(), streams.v.begin(), streams.v.begin() + take * streams.cols);
      if (layer + 1 == m.config().num_hidden_layers) hidden_rows += streams.rows;
    };
  engine::Engine engine(m, ec);

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  std::optional<clock::time_point> t1;  // the first token: the prompt is in
  std::vector<int32_t> generated;
  std::vector<float> prompt_logits, gen_logits;
  std::optional<ReplyText> reply;
  if (input.mode != PromptMode::Ids) reply.emplace(input);
  // On a terminal, ids are shown as they are made: a long run shows it is running.
  const bool live_ids = input.mode == PromptMode::Ids && ::isatty(STDOUT_FILENO) != 0;
  engine.add_request("generate", prompt, sampling);
  bool stopped = false;  // a stop string ended the reply: a step's later tokens (speculative drafts) are not shown
  do {
    for (engine::TokenEvent& e : engine.step()) {
      if (!e.token || stopped) continue;
      if (!t1) t1 = clock::now();
      generated.push_back(*e.token);
      if (reply && !reply->push(*e.token)) {
        engine.abort("generate");
        stopped = true;
      }
      if (live_ids) {
        std::printf("%s%d", generated.size() > 1 ? "," : "", *e.token);
        std::fflush(stdout);
      }
      if (!e.prompt_logits.empty()) prompt_logits = std::move(e.prompt_logits);
      gen_logits.insert(gen_logits.end(), e.logits.begin(), e.logits.end());
    }
  } while (engine.has_unfinished());
  const auto t2 = clock::now();
  if (!t1) t1 = t2;

  if (live_ids) std::printf("\n");
  else print_output(input, generated, reply ? reply->finish() : std::string());
  const double prefill_s = std::chrono::duration<double>(*t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - *t1).count();
  const double decode_steps = static_cast<double>(generated.size() > 0 ? generated.size() - 1 : 0);
  std::fprintf(stderr, "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %zu tokens in %.3f s (%.1f tokens/s)\n",
               static_cast<long long>(n_prompt), prefill_s, n_prompt / prefill_s, generated.size(), decode_s,
               decode_steps > 0 ? decode_steps / decode_s : 0.0);
  if (speculative.enabled()) {
    const engine::SpeculativeCounts c = engine.stats().speculative;
    std::fprintf(stderr,
                 "speculative: %lld drafted, %lld verified, %lld accepted (%.1f%%) in %lld verify steps (mean accepted "
                 "length %.2f); %lld tokens emitted by them, %lld dropped past the end\n",
                 static_cast<long long>(c.drafted), static_cast<long long>(c.verified), static_cast<long long>(c.accepted),
                 100.0 * c.acceptance_rate(), static_cast<long long>(c.verify_steps), c.mean_accepted_length(),
                 static_cast<long long>(c.emitted), static_cast<long long>(c.truncated));
  }

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
