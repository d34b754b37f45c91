// `strata serve`: the OpenAI-compatible HTTP server over one engine, until SIGTERM or SIGINT.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.h"
#include "cli/backend_flags.h"
#include "cli/engine_options.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "bench/serve_client.h"
#include "core/error.h"
#include "disagg/replica_role.h"
#include "engine/engine.h"
#include "model/model_family.h"
#include "model/state_pool.h"
#include "server/server.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata serve — an OpenAI-compatible HTTP server for a DeepSeek-V4 checkpoint.

options:
  --model DIR                checkpoint directory (config.json + safetensors + tokenizer.json/tokenizer_config.json;
                             default: the demo model, models/demo/ of the repository)
  --host ADDR                address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)
  --port N                   TCP port (default 8000; 0 picks a free one and prints it)
  --device cpu|cuda          the backend (cuda: a build with the CUDA backend and an NVIDIA GPU)
  --precision P              with --device cuda: bf16 (default), fp32, or fp8 (the checkpoint's FP8 matrices stay FP8)
                             on the CPU: official (DeepSeek's own numerics; docs/official_numerics.md)
  --cuda-graphs on|off       with --device cuda: replay decode steps as CUDA graphs (default on)
  --cuda-op-times            with --device cuda: time every backend op with CUDA events, a table at exit
  --batch-invariant          with --device cuda: a request's tokens and logprobs do not depend on the other
                             requests in its batches (docs/batch_invariance.md; the CPU backend always is)
  --api-key KEY[,KEY...]     require 'Authorization: Bearer KEY' on /v1/* (/health and /metrics stay open)
  --served-model-name NAME   the model id clients send and see (default: the basename of --model)
  --max-model-len N          prompt + generated tokens per sequence (default: min(8192, the model's
                             max_position_embeddings))
  --state-memory BYTES       memory for per-sequence state (sliding-window and compressor rings, token blocks of
                             compressed entries), e.g. 2GiB or 512M (default: --max-num-seqs slots plus 256 token
                             blocks of 128 tokens)
  --max-num-seqs N           sequences in flight at once (default 64); each choice of a request is one sequence
  --max-num-batched-tokens N tokens per engine step, the prefill chunk budget (default 2048)
  --max-body-bytes N         largest request body accepted, else 413 (default 8388608)
  --max-n N                  largest n (choices per prompt) accepted, else 400 (default 16)
  --shutdown-grace S         on SIGTERM/SIGINT, seconds in-flight requests may take to finish before they are
                             aborted (default 30; a second signal aborts them at once)
  --idle-timeout S           close a keep-alive connection idle for S seconds (default 300)
  --cache-scope key|global   with --api-key: each key has its own cached prefixes (default key), or all share
  --grammar-cache N          structured outputs: compiled grammars kept across requests (default 256)
  --grammar-compile-timeout S  a grammar, schema or regex that takes longer to compile is a 400 (default 10)
  --grammar-max-bytes N      a longer grammar, schema, regex or choice list is a 400 (default 65536)

prefill/decode disaggregation (docs/disaggregation.md):
  --role both|prefill|decode both (default): answers completions; prefill: only computes prompts for decode
                             replicas (POST /strata/v1/prefill) and ships their state; decode: answers completions
                             and has their prompts prefilled by a prefill replica
  --prefill-peer URL         the prefill replica (http://HOST:PORT) for requests that name none (the router names
                             one per request in the header X-Strata-Prefill); without either, prompts are computed
                             here
  --transfer-timeout S       seconds a prompt's remote prefill and state transfer may take; past it, or on any
                             failure, the prompt is computed here and the client sees no error (default 60)
  --transfer tcp|shared      how a decode replica asks for the state: tcp (default): every byte over the socket;
                             shared: the prefill replica is on this host, and the state's floats move through
                             memory both map (CUDA IPC device memory on GPUs, POSIX shared memory on CPUs), only
                             its skeleton over the socket (a replica that cannot answers over tcp)
)";
constexpr const char* kHelpTail = R"(
Endpoints: POST /v1/chat/completions, POST /v1/completions (stream or not), GET /v1/models, GET /health,
GET /metrics (Prometheus text), GET /strata/v1/load (the load report `strata route` reads, JSON).

example:
  strata serve --port 8000 &   # the demo model (models/demo/); --model DIR for another checkpoint
  curl localhost:8000/v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8}'
)";


}  // namespace

int serve_command(const std::vector<std::string>& argv) {
  const Args args(argv,
                  with_speculative_options(with_cache_options({"model", "host", "port", "device", "precision", "cuda-graphs", "api-key", "served-model-name", "max-model-len", "state-memory",
                   "max-num-seqs", "max-num-batched-tokens", "max-body-bytes", "max-n", "shutdown-grace", "idle-timeout",
                   "cache-scope", "grammar-cache", "grammar-compile-timeout", "grammar-max-bytes", "role",
                   "prefill-peer", "transfer-timeout", "transfer"})),
                  {"help", "cuda-op-times", "batch-invariant"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    std::fputs(kCacheOptionsHelp, stdout);
    std::fputs(kSpeculativeOptionsHelp, stdout);
    std::fputs(kHelpTail, stdout);
    return 0;
  }
  const BackendFlags backend = read_backend_flags(args);
  const int64_t port = args.integer("port", 8000);
  if (port < 0 || port > 65535) fail("option --port: expected 0..65535, found ", port);
  const EngineOptions engine_options = read_engine_options(args, 64);
  const double grace_s = args.number("shutdown-grace", 30.0);
  if (!(grace_s >= 0)) fail("option --shutdown-grace: expected seconds ≥ 0, found ", grace_s);
  const double idle_s = args.number("idle-timeout", 300.0);
  if (!(idle_s > 0)) fail("option --idle-timeout: expected seconds > 0, found ", idle_s);
  const int64_t max_body = positive_integer(args, "max-body-bytes", 8 << 20);
  const int64_t max_n = positive_integer(args, "max-n", 16);
  const int64_t grammar_entries = positive_integer(args, "grammar-cache", 256);
  const int64_t grammar_bytes = positive_integer(args, "grammar-max-bytes", 64 << 10);
  const double grammar_timeout_s = args.number("grammar-compile-timeout", 10.0);
  if (!(grammar_timeout_s > 0))
    fail("option --grammar-compile-timeout: expected seconds > 0, found ", grammar_timeout_s);
  disagg::Role role = disagg::Role::Both;
  try {
    role = disagg::parse_role(args.str("role", "both"));
  } catch (const Error& e) {
    fail("option --role: ", e.what());
  }
  const std::string prefill_peer = args.str("prefill-peer", "");
  if (!prefill_peer.empty()) {
    if (role == disagg::Role::Prefill) fail("option --prefill-peer: a replica with --role prefill has no prefill peer");
    try {
      bench::parse_server_url(prefill_peer);
    } catch (const Error& e) {
      fail("option --prefill-peer: ", e.what());
    }
  }
  const double transfer_timeout_s = args.number("transfer-timeout", 60.0);
  if (!(transfer_timeout_s > 0)) fail("option --transfer-timeout: expected seconds > 0, found ", transfer_timeout_s);
  const std::string transfer = args.str("transfer", "tcp");
  if (transfer != "tcp" && transfer != "shared")
    fail("option --transfer: expected tcp or shared, found '", transfer, "'");
  const std::string dir = model_dir_or_default(args);  // after the options: a bad flag is named before the model

  // Block the shutdown signals before any thread starts, so every thread inherits the mask and only the
  // sigtimedwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const text::Tokenizer tokenizer = text::Tokenizer::load(dir);
  const std::unique_ptr<model::Model> loaded =
      model::open_checkpoint(dir, backend.device, backend.precision, backend.cuda, engine_options.max_rollback());
  const model::Model& model = *loaded;
  const model::ModelConfig& mc = model.config();
  if (tokenizer.vocab_size() > mc.vocab_size)
    fail("--model ", dir, ": the tokenizer has ids up to ", tokenizer.vocab_size() - 1, " but the model's vocab_size is ",
         mc.vocab_size);

  const engine::EngineConfig ec = make_engine_config(engine_options, args, model);

  server::ServerConfig sc;
  sc.host = args.str("host", "127.0.0.1");
  sc.port = static_cast<uint16_t>(port);
  if (args.has("api-key")) {
    const std::string keys = args.str("api-key");
    for (size_t start = 0;;) {
      const size_t comma = keys.find(',', start);
      sc.api_keys.push_back(keys.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (sc.api_keys.back().empty()) fail("option --api-key: an empty key in '", keys, "'");
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  const std::string scope = args.str("cache-scope", "key");
  if (scope != "key" && scope != "global") fail("option --cache-scope: expected key or global, found '", scope, "'");
  sc.cache_scope_per_key = scope == "key";
  sc.served_model_name = args.str("served-model-name", default_served_model_name(dir));
  sc.max_body_bytes = static_cast<size_t>(max_body);
  sc.limits.max_n = max_n;
  sc.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(idle_s * 1000));
  sc.grammar_limits.max_entries = static_cast<size_t>(grammar_entries);
  sc.grammar_limits.max_source_bytes = static_cast<size_t>(grammar_bytes);
  sc.grammar_limits.max_compile_time = std::chrono::milliseconds(static_cast<int64_t>(grammar_timeout_s * 1000));
  sc.role = role;
  sc.prefill_peer = prefill_peer;
  sc.transfer_timeout = std::chrono::milliseconds(static_cast<int64_t>(transfer_timeout_s * 1000));
  sc.shared_transfer = transfer == "shared";

  server::Server server(model, tokenizer, ec, sc);
  server.start();
  std::fprintf(stderr,
               "strata serve: listening on http://%s:%u — model '%s', max_model_len %lld, %lld sequence slots, %lld "
               "token blocks, role %s%s\n",
               sc.host.c_str(), static_cast<unsigned>(server.port()), sc.served_model_name.c_str(),
               static_cast<long long>(ec.max_model_len), static_cast<long long>(ec.pool.max_sequences),
               static_cast<long long>(ec.pool.blocks), disagg::to_string(sc.role),
               sc.api_keys.empty() ? "" : ", API key required");
  if (!sc.prefill_peer.empty()) std::fprintf(stderr, "strata serve: prompts prefilled on %s\n", sc.prefill_peer.c_str());
  if (ec.cache) {
    const cache::StoreConfig& store = ec.cache->config().store;
    std::fprintf(stderr, "strata serve: prefix cache on — %lld MiB of host memory%s%s\n",
                 static_cast<long long>(store.host_bytes >> 20), store.dir.empty() ? "" : ", files in ",
                 store.dir.c_str());
  }

  std::thread waiter;
  int received = 0;
  while (!server.stopped()) {
    const timespec tick{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig <= 0) continue;
    if (++received == 1) {
      std::fprintf(stderr, "strata serve: %s — stopped accepting; in-flight requests have %.0f s to finish (signal "
                           "again to abort them now)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT", grace_s);
      server.shutdown(std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
      waiter = std::thread([&server] { server.wait(); });
    } else {
      std::fprintf(stderr, "strata serve: aborting in-flight requests\n");
      server.shutdown(std::chrono::milliseconds(0));
    }
  }
  if (waiter.joinable()) waiter.join();
  std::fprintf(stderr, "strata serve: stopped\n");
  return 0;
}

}  // namespace strata::cli
