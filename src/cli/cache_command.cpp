// `strata cache stats|verify|gc --cache-dir DIR`: a prefix-cache directory (cache/cache_directory.h) without a
// model or a server.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/cache_directory.h"
#include "cache/kv_store.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata cache — inspect or clean a prefix-cache directory (strata serve --cache-dir DIR).

usage: strata cache stats|verify|gc --cache-dir DIR [options]

  stats    per model fingerprint: token blocks, boundary rows, bytes, expired and damaged files (headers only)
  verify   the same, reading every file through its checksums; exit code 1 if any file is damaged
  gc       delete expired and damaged files and temporary files a crashed writer left; with --max-bytes, then
           the least recently used files until the directory fits (safe while servers use the directory: a file
           they still want is a miss for them, never a wrong answer)

options:
  --cache-dir DIR    the directory (required)
  --max-bytes BYTES  gc: the budget for the whole directory, e.g. 100GiB
  --json             print the report as JSON

example:
  strata cache stats --cache-dir /tmp/strata-cache
)";

}  // namespace

int cache_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    std::fputs(kHelp, argv.empty() ? stderr : stdout);
    return argv.empty() ? 2 : 0;
  }
  const std::string action_name = argv[0];
  const Args args(std::vector<std::string>(argv.begin() + 1, argv.end()), {"cache-dir", "max-bytes"}, {"help", "json"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  cache::DirectoryAction action;
  if (action_name == "stats") action = cache::DirectoryAction::Stats;
  else if (action_name == "verify") action = cache::DirectoryAction::Verify;
  else if (action_name == "gc") action = cache::DirectoryAction::Gc;
  else fail("strata cache: unknown action '", action_name, "' (expected stats, verify or gc)");
  if (!args.has("cache-dir")) fail("strata cache ", action_name, ": --cache-dir DIR is required");
  std::optional<int64_t> max_bytes;
  if (args.has("max-bytes")) {
    if (action != cache::DirectoryAction::Gc) fail("option --max-bytes: only gc takes it");
    max_bytes = parse_byte_count(args.str("max-bytes"), "max-bytes");
  }
  const cache::DirectoryReport report =
      cache::inspect_cache_directory(args.str("cache-dir"), action, cache::system_clock_seconds(), max_bytes);
  int64_t damaged = 0;
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto& [fp, m] : report.models) {
    damaged += m.damaged;
    json[fp] = {{"blocks", m.blocks},   {"rows", m.rows},         {"bytes", m.bytes},
                {"expired", m.expired}, {"damaged", m.damaged},   {"temporary", m.temporary},
                {"evicted", m.evicted}, {"evicted_bytes", m.evicted_bytes}, {"problems", m.problems}};
    if (args.has("json")) continue;
    std::printf("model %s: %lld token blocks, %lld boundary rows, %.1f MiB; %lld expired, %lld damaged, %lld temporary%s\n",
                fp.c_str(), static_cast<long long>(m.blocks), static_cast<long long>(m.rows),
                static_cast<double>(m.bytes) / (1 << 20), static_cast<long long>(m.expired),
                static_cast<long long>(m.damaged), static_cast<long long>(m.temporary),
                action == cache::DirectoryAction::Gc ? " (deleted)" : "");
    if (m.evicted > 0)
      std::printf("  gc: %lld least recently used files deleted (%.1f MiB) to fit --max-bytes\n",
                  static_cast<long long>(m.evicted), static_cast<double>(m.evicted_bytes) / (1 << 20));
    for (const std::string& p : m.problems) std::printf("  damaged: %s\n", p.c_str());
  }
  if (args.has("json")) std::printf("%s\n", json.dump(2).c_str());
  else if (report.models.empty()) std::printf("no cached models in %s\n", args.str("cache-dir").c_str());
  return action == cache::DirectoryAction::Verify && damaged > 0 ? 1 : 0;
}

}  // namespace strata::cli
