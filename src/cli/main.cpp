// The `strata` binary: one entry point, a subcommand per job.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"

namespace {

constexpr const char* kUsage = R"(strata — a DeepSeek-V4 inference engine

usage: strata <command> [options]

commands:
  generate   run a prompt through a model and print the generated token ids
  bench      measure prefill and decode tokens/s of a checkpoint; writes JSON
             (bench serve: load-test an OpenAI-compatible server — TTFT, TPOT, ITL, throughput, goodput)
  model      inspect a checkpoint (model info) or write a random-weight one (model init)
  tokenize   encode text with a model directory's tokenizer; prints token ids as JSON
  chat-template  print the DeepSeek-V4 prompt (or its ids) for an OpenAI chat-completions request
  serve      OpenAI-compatible HTTP server (chat/completions, completions, models, health, metrics)
  route      OpenAI-compatible router in front of several serve replicas (cache-aware, least load, failover)
  cache      inspect or clean a prefix-cache directory (stats, verify, gc)
  version    print the version

Run `strata <command> --help` for the options of a command, with an example.
)";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  try {
    if (command == "generate") return strata::cli::generate_command(args);
    if (command == "model") return strata::cli::model_command(args);
#ifdef STRATA_WITH_SERVER
    if (command == "bench" && !args.empty() && args[0] == "serve")
      return strata::cli::bench_serve_command(std::vector<std::string>(args.begin() + 1, args.end()));
#else
    if (command == "bench" && !args.empty() && args[0] == "serve")
      strata::fail("this build has no HTTP client for bench serve: Boost.Beast (Debian libboost-dev) was missing");
#endif
    if (command == "bench") return strata::cli::bench_command(args);
    if (command == "tokenize") return strata::cli::tokenize_command(args);
    if (command == "cache") return strata::cli::cache_command(args);
    if (command == "chat-template") return strata::cli::chat_template_command(args);
#ifdef STRATA_WITH_SERVER
    if (command == "serve") return strata::cli::serve_command(args);
    if (command == "route") return strata::cli::route_command(args);
#else
    if (command == "serve") strata::fail("this build has no HTTP server: Boost.Beast (Debian libboost-dev) was missing");
    if (command == "route") strata::fail("this build has no HTTP router: Boost.Beast (Debian libboost-dev) was missing");
#endif
    if (command == "version" || command == "--version") {
      std::printf("strata %s\n", STRATA_VERSION);
      return 0;
    }
    std::fprintf(stderr, "strata: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata %s: error: %s\n", command.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata %s: internal error: %s\n", command.c_str(), e.what());
    return 3;
  }
}
