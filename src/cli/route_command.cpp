// `strata route`: the router (src/router/) in front of N replicas of `strata serve`, until SIGTERM or SIGINT.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "core/error.h"
#include "router/router.h"
#include "text/tokenizer.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata route — an OpenAI-compatible router in front of several `strata serve` replicas.

Clients send the same API as to one replica (streams are passed through); each completion request goes to one
replica, chosen by the policy from the replicas' own load reports (GET /strata/v1/load).

replicas (repeat each flag; at least one --backend or --decode):
  --backend URL              a colocated replica (prefills and decodes), e.g. http://127.0.0.1:8001
  --decode URL               a decode replica of a prefill/decode pair: it is sent requests with the header
                             X-Strata-Prefill naming the least loaded healthy --prefill replica
  --prefill URL              a prefill replica (needs a --decode)
  --config FILE.json         replicas and options from a file: {"backend": [URL, ...], "prefill": [...],
                             "decode": [...], and any option below by its name without --, e.g.
                             "policy": "least_load", "health-interval": 0.5}; flags given too override it

options:
  --host ADDR                address to listen on (default 127.0.0.1)
  --port N                   TCP port (default 8000; 0 picks a free one and prints it)
  --policy P                 cache_aware (default): a request goes to the replica that holds the longest prefix of
                             its prompt, unless that one's load exceeds the least loaded's by more than
                             --cache-threshold; least_load; round_robin (the baseline)
  --cache-threshold N        in requests (default 8); also bounds how far a prompt_cache_key's replica may be
                             loaded beyond the least before the key moves
  --model DIR                the tokenizer the replicas use, for cache-aware block hashes (default: the demo
                             model, models/demo/ of the repository); only cache_aware loads it
  --index-blocks N           block hashes the cache-aware index remembers, least recently sent forgotten first
                             (default 1048576, about 100 bytes each)
  --health-interval S        seconds between two load reports of a replica (default 1)
  --health-timeout S         a load report slower than this is a failed check (default 2)
  --eject-after N            failed checks in a row that eject a replica (default 2); a refused connection
                             ejects at once
  --readmit-after N          good checks in a row that re-admit an ejected replica (default 2)
  --max-attempts N           replicas a request may try before its first byte comes back (default 3)
  --max-in-flight N          requests open on one replica before it counts as saturated (default 1024); when
                             every replica is, requests get 429 with Retry-After
  --max-waiting N            also saturated when it reports N waiting sequences (default 0: no limit)
  --connect-timeout S        (default 2)
  --spare-connections N      kept-alive connections per replica opened ahead of need, so that a request rarely
                             waits for a connect (default 4; 0: connect only when a request needs one)
  --request-timeout S        a request's whole time on a replica (default 600)
  --max-body-bytes N         largest request body accepted, else 413 (default 8388608)
  --shutdown-grace S         on SIGTERM/SIGINT, seconds in-flight requests may take to finish (default 30)

Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models (passed to a replica);
GET /health (200 while a replica is healthy), GET /metrics (per-replica load, decisions by reason, retries,
ejections, the router's overhead; Prometheus text). Authorization headers are passed through to the replicas.

example (from the repository root):
  strata serve --port 8001 &
  strata serve --port 8002 &
  strata route --port 8000 --backend http://127.0.0.1:8001 --backend http://127.0.0.1:8002 &
  curl localhost:8000/v1/completions -d '{"prompt":"Hello","max_tokens":8}'
)";

const std::set<std::string> kValued = {"host", "port", "policy", "cache-threshold", "model", "index-blocks",
                                       "health-interval", "health-timeout", "eject-after", "readmit-after",
                                       "max-attempts", "max-in-flight", "max-waiting", "connect-timeout", "spare-connections",
                                       "request-timeout", "max-body-bytes", "shutdown-grace"};

struct ReplicaFlags {
  std::vector<router::ReplicaSpec> replicas;
  std::vector<std::string> rest;  // every other argument, for Args
};

std::optional<router::ReplicaRole> role_of(const std::string& name) {
  if (name == "backend") return router::ReplicaRole::Colocated;
  if (name == "prefill") return router::ReplicaRole::Prefill;
  if (name == "decode") return router::ReplicaRole::Decode;
  return std::nullopt;
}

// The repeatable replica flags (--backend URL, --backend=URL, ...) taken out of argv.
ReplicaFlags take_replica_flags(const std::vector<std::string>& argv) {
  ReplicaFlags out;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    std::string name = a.rfind("--", 0) == 0 ? a.substr(2) : "", value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const std::optional<router::ReplicaRole> role = role_of(name);
    if (!role) {
      out.rest.push_back(a);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size()) fail("option --", name, " needs a URL (http://HOST:PORT)");
      value = argv[++i];
    }
    if (value.empty()) fail("option --", name, ": expected a URL (http://HOST:PORT), found ''");
    out.replicas.push_back({value, *role});
  }
  return out;
}

// --config FILE.json: its replicas, and its options as arguments (placed before the command line's, so those win).
ReplicaFlags read_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--config ", path, ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("--config ", path, ": not valid JSON");
  if (!j.is_object()) fail("--config ", path, ": expected a JSON object of options, found ", j.type_name());
  ReplicaFlags out;
  for (const auto& [key, value] : j.items()) {
    if (const std::optional<router::ReplicaRole> role = role_of(key)) {
      const bool list = value.is_array();
      if (!value.is_string() && !list)
        fail("--config ", path, ": \"", key, "\" must be a URL or a list of URLs, found ", value.dump());
      for (const nlohmann::json& url : list ? value : nlohmann::json::array({value})) {
        if (!url.is_string() || url.get<std::string>().empty())
          fail("--config ", path, ": \"", key, "\" must list URLs as strings, found ", url.dump());
        out.replicas.push_back({url.get<std::string>(), *role});
      }
      continue;
    }
    if (!kValued.count(key))
      fail("--config ", path, ": unknown option \"", key, "\" (the options of --help, without --; replicas go in "
           "\"backend\", \"prefill\", \"decode\")");
    std::string v;
    if (value.is_string()) v = value.get<std::string>();
    else if (value.is_number_integer()) v = std::to_string(value.get<int64_t>());
    else if (value.is_number()) v = value.dump();
    else fail("--config ", path, ": \"", key, "\" must be a string or a number, found ", value.dump());
    out.rest.push_back("--" + key);
    out.rest.push_back(v);
  }
  return out;
}

std::chrono::milliseconds seconds_option(const Args& args, const std::string& name, double fallback) {
  const double s = args.number(name, fallback);
  if (!(s > 0) || !std::isfinite(s)) fail("option --", name, ": expected seconds > 0, found ", s);
  return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(std::llround(s * 1000))));
}

}  // namespace

int route_command(const std::vector<std::string>& argv) {
  for (const std::string& a : argv)
    if (a == "--help") {
      std::fputs(kHelp, stdout);
      return 0;
    }
  ReplicaFlags given = take_replica_flags(argv);
  // --config first: the command line's options come after its, and Args keeps the last value of an option.
  std::vector<std::string> merged;
  for (size_t i = 0; i < given.rest.size(); ++i) {
    if (given.rest[i] != "--config" && given.rest[i].rfind("--config=", 0) != 0) continue;
    std::string path = given.rest[i].size() > 8 ? given.rest[i].substr(9) : "";
    if (given.rest[i] == "--config") {
      if (i + 1 >= given.rest.size()) fail("option --config needs a value");
      path = given.rest[i + 1];
      given.rest.erase(given.rest.begin() + static_cast<std::ptrdiff_t>(i), given.rest.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    } else {
      given.rest.erase(given.rest.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ReplicaFlags file = read_config_file(path);
    given.replicas.insert(given.replicas.begin(), file.replicas.begin(), file.replicas.end());
    merged = std::move(file.rest);
    break;
  }
  merged.insert(merged.end(), given.rest.begin(), given.rest.end());
  const Args args(merged, kValued, {});

  router::RouterConfig rc;
  rc.replicas = given.replicas;
  if (rc.replicas.empty())
    fail("no replicas: give --backend URL (repeat it for each replica), or --decode URL with --prefill URL, or "
         "--config FILE.json (see --help)");
  rc.host = args.str("host", "127.0.0.1");
  const int64_t port = args.integer("port", 8000);
  if (port < 0 || port > 65535) fail("option --port: expected 0..65535, found ", port);
  rc.port = static_cast<uint16_t>(port);
  const std::string policy = args.str("policy", "cache_aware");
  const std::optional<router::Policy> parsed = router::parse_policy(policy);
  if (!parsed) fail("option --policy: expected cache_aware, least_load or round_robin, found '", policy, "'");
  rc.policy = *parsed;
  rc.cache_threshold = args.number("cache-threshold", rc.cache_threshold);
  if (!(rc.cache_threshold >= 0)) fail("option --cache-threshold: expected a load ≥ 0, found ", rc.cache_threshold);
  rc.index_blocks = static_cast<size_t>(positive_integer(args, "index-blocks", static_cast<int64_t>(rc.index_blocks)));
  rc.health_interval = seconds_option(args, "health-interval", 1);
  rc.health_timeout = seconds_option(args, "health-timeout", 2);
  rc.eject_after = static_cast<int>(positive_integer(args, "eject-after", rc.eject_after));
  rc.readmit_after = static_cast<int>(positive_integer(args, "readmit-after", rc.readmit_after));
  rc.max_attempts = static_cast<int>(positive_integer(args, "max-attempts", rc.max_attempts));
  rc.max_in_flight = positive_integer(args, "max-in-flight", rc.max_in_flight);
  rc.max_waiting = args.integer("max-waiting", 0);
  if (rc.max_waiting < 0) fail("option --max-waiting: expected sequences ≥ 0 (0: no limit), found ", rc.max_waiting);
  rc.connect_timeout = seconds_option(args, "connect-timeout", 2);
  rc.spare_connections = args.integer("spare-connections", rc.spare_connections);
  if (rc.spare_connections < 0 || rc.spare_connections > 1024)
    fail("option --spare-connections: expected connections per replica in 0…1024, found ", rc.spare_connections);
  rc.request_timeout = seconds_option(args, "request-timeout", 600);
  rc.max_body_bytes = static_cast<size_t>(positive_integer(args, "max-body-bytes", 8 << 20));
  const double grace_s = args.number("shutdown-grace", 30.0);
  if (!(grace_s >= 0)) fail("option --shutdown-grace: expected seconds ≥ 0, found ", grace_s);

  std::optional<text::Tokenizer> tokenizer;
  if (rc.policy == router::Policy::CacheAware) {
    tokenizer = text::Tokenizer::load(model_dir_or_default(args));
    rc.tokenizer = &*tokenizer;
  } else if (args.has("model")) {
    fail("option --model: only --policy cache_aware tokenizes prompts");
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  router::Router router(rc);
  router.start();
  std::fprintf(stderr, "strata route: listening on http://%s:%u — %zu replicas, policy %s\n", rc.host.c_str(),
               static_cast<unsigned>(router.port()), rc.replicas.size(), router::policy_name(rc.policy));

  std::thread waiter;
  int received = 0;
  while (!router.stopped()) {
    const timespec tick{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig <= 0) continue;
    if (++received == 1) {
      std::fprintf(stderr, "strata route: %s — stopped accepting; in-flight requests have %.0f s to finish\n",
                   sig == SIGTERM ? "SIGTERM" : "SIGINT", grace_s);
      router.shutdown(std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)));
      waiter = std::thread([&router] { router.wait(); });
    } else {
      router.shutdown(std::chrono::milliseconds(0));
    }
  }
  if (waiter.joinable()) waiter.join();
  std::fprintf(stderr, "strata route: stopped\n");
  return 0;
}

}  // namespace strata::cli
