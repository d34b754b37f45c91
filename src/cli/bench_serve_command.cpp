// `strata bench serve`: an HTTP load generator for OpenAI-compatible servers (strata serve, vLLM, ...): streams
// completions at a concurrency and request rate, reports TTFT / TPOT / ITL / E2E, throughput and goodput, and
// writes them as JSON with the device, date and commit.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "bench/serve_client.h"
#include "bench/serve_report.h"
#include "bench/serve_workload.h"
#include "cli/args.h"
#include "cli/bench_plots.h"
#include "cli/commands.h"
#include "cli/git_commit.h"
#include "core/error.h"

namespace strata::cli {

namespace {

constexpr const char* kHelp = R"(strata bench serve — load-test an OpenAI-compatible server with streamed completions.

Each request streams /v1/completions with a prompt of random token ids (or /v1/chat/completions with random words,
--chat), max_tokens = its output length and ignore_eos, so every request generates exactly that many tokens.

options:
  --url URL              the server, http://HOST:PORT[/PREFIX] (default http://127.0.0.1:8000)
  --model NAME           the "model" of each request (default: the first id GET /v1/models lists)
  --api-key KEY          sent as "Authorization: Bearer KEY"
  --chat                 stream /v1/chat/completions (prompts are random words) instead of /v1/completions
  --concurrency C        requests in flight at most (default 1)
  --rate R               requests/s, Poisson arrivals (default inf: all released at once; C bounds them)
  --num-prompts N        requests to send (default 100)
  --dataset NAME         random (default): --input-len random ids per prompt;
                         shared-prefix: a --prefix-len prefix shared by every prompt (or by each of
                         --num-prefixes groups), then --input-len random ids of its own;
                         growing-history: --num-prefixes conversations, each request the next turn of one,
                         resending its whole history (--prefix-len ids, then --input-len new ids a turn)
  --input-len N          prompt tokens (default 128; the suffix after the prefix for shared-prefix)
  --output-len N         tokens to generate per request (default 128)
  --prefix-len N         shared-prefix, growing-history: tokens in the shared prefix (the first turn's history)
  --num-prefixes N       shared-prefix: distinct prefixes, request i uses prefix i mod N (default 1);
                         growing-history: conversations, request i is turn i / N of conversation i mod N
  --range-ratio R        draw each input/output length from [len·(1−R), len·(1+R)] (default 0: fixed)
  --token-ids LO:HI      random ids come from [LO, HI) (default 1000:30000; keep below the model's vocabulary)
  --temperature T        sampling temperature of every request (default 0)
  --no-ignore-eos        let requests stop at EOS (lengths then vary)
  --slo-ttft-ms MS, --slo-tpot-ms MS, --slo-e2e-ms MS
                         service-level objectives: goodput counts the requests/s that met all that are given
  --warmup N             send N requests first, unmeasured (default 0)
  --timeout S            per-request limit in seconds (default 600)
  --seed S               of the prompts and the arrival times (default 0)
  --label TEXT           recorded in the JSON config (e.g. which model the server runs)
  --commit SHA           git commit recorded in the JSON (default: git rev-parse HEAD with "-dirty" when
                         tracked files differ, else "unknown")
  --out FILE.json        write device, date, commit, config and results as JSON, and FILE_latency.png beside it:
                         the CDFs of TTFT, TPOT, ITL and E2E, drawn by gnuplot
  --plots on|off         draw that PNG (default on; without gnuplot a warning says so)

Reported: request, output-token and total-token throughput; TTFT (send → first token chunk), TPOT ((E2E − TTFT)
/ (tokens − 1)), ITL (gaps between token chunks) and E2E latency, each mean / median / p90 / p99 in ms.
Exit code 1 when any request failed (the errors are listed).

example (from the repository root):
  strata serve --port 8000 --max-num-seqs 64 &   # the demo model (models/demo/)
  strata bench serve --url http://127.0.0.1:8000 --concurrency 16 --num-prompts 64 --input-len 32 \
    --output-len 32 --slo-ttft-ms 500 --slo-tpot-ms 50 --out /tmp/serve.json
)";

// FILE_latency.png beside --out FILE.json: the CDFs of the completed requests' latencies. The run is over and its
// JSON written, so a missing or failing gnuplot is a warning.
void draw_latency_plot(const bench::LoadResult& result, const nlohmann::ordered_json& run, const std::string& json_path) {
  std::map<std::string, std::vector<double>> ms;
  for (const bench::RequestRecord& q : result.requests) {
    if (!q.ok) continue;
    ms["TTFT"].push_back(q.ttft_s * 1e3);
    ms["E2E"].push_back(q.e2e_s * 1e3);
    if (q.output_tokens > 1) ms["TPOT"].push_back((q.e2e_s - q.ttft_s) * 1e3 / static_cast<double>(q.output_tokens - 1));
    for (const double gap : q.itl_s) ms["ITL"].push_back(gap * 1e3);
  }
  const nlohmann::ordered_json& c = run["config"];
  const std::string title = c["endpoint"].get<std::string>() + ", concurrency " + c["concurrency"].dump() + ", " +
                            c["num_prompts"].dump() + " requests (" + run["date"].get<std::string>().substr(0, 10) + ")";
  try {
    for (const std::string& png : run_gnuplot(latency_cdf_script(ms, title, json_path), json_path))
      std::fprintf(stderr, "plot: %s\n", png.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "strata bench serve: warning: no plots: %s\n", e.what());
  }
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::optional<double> slo(const Args& args, const std::string& name) {
  if (!args.has(name)) return std::nullopt;
  const double v = args.number(name, 0);
  if (!(v > 0)) fail("option --", name, ": expected milliseconds > 0, found ", v);
  return v;
}

int64_t at_least(const Args& args, const std::string& name, int64_t fallback, int64_t least) {
  const int64_t v = args.integer(name, fallback);
  if (v < least) fail("option --", name, ": expected an integer ≥ ", least, ", found ", v);
  return v;
}

}  // namespace

int bench_serve_command(const std::vector<std::string>& argv) {
  const Args args(argv,
                  {"url", "model", "api-key", "concurrency", "rate", "num-prompts", "dataset", "input-len", "output-len",
                   "prefix-len", "num-prefixes", "range-ratio", "token-ids", "temperature", "slo-ttft-ms", "slo-tpot-ms",
                   "slo-e2e-ms", "warmup", "timeout", "seed", "label", "commit", "out", "plots"},
                  {"help", "chat", "no-ignore-eos"});
  if (args.has("help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  bench::WorkloadConfig w;
  w.dataset = args.str("dataset", "random");
  w.num_prompts = at_least(args, "num-prompts", 100, 1);
  w.input_len = at_least(args, "input-len", 128, 0);
  w.output_len = at_least(args, "output-len", 128, 1);
  w.prefix_len = at_least(args, "prefix-len", 0, 0);
  w.num_prefixes = at_least(args, "num-prefixes", 1, 1);
  w.range_ratio = args.number("range-ratio", 0.0);
  w.chat = args.has("chat");
  w.seed = static_cast<uint64_t>(at_least(args, "seed", 0, 0));
  if (args.has("token-ids")) {
    const std::string range = args.str("token-ids");
    const size_t colon = range.find(':');
    if (colon == std::string::npos) fail("option --token-ids: expected LO:HI, found '", range, "'");
    const std::vector<int32_t> lo = parse_id_list(range.substr(0, colon), "token-ids");
    const std::vector<int32_t> hi = parse_id_list(range.substr(colon + 1), "token-ids");
    if (lo.size() != 1 || hi.size() != 1) fail("option --token-ids: expected LO:HI, found '", range, "'");
    w.token_lo = lo[0];
    w.token_hi = hi[0];
  }
  std::vector<bench::BenchPrompt> prompts;
  try {
    prompts = bench::make_workload(w);
  } catch (const Error& e) {
    fail("option --", e.what());  // the workload names the field: "option --input-len: expected ≥ 1, ..."
  }

  bench::LoadConfig load;
  load.url = args.str("url", "http://127.0.0.1:8000");
  bench::parse_server_url(load.url);  // a bad URL fails before anything is sent
  load.chat = w.chat;
  load.api_key = args.str("api-key");
  load.concurrency = at_least(args, "concurrency", 1, 1);
  load.request_rate = args.has("rate") ? args.number("rate", 0) : std::numeric_limits<double>::infinity();
  if (!(load.request_rate > 0)) fail("option --rate: expected requests/s > 0 (or inf), found ", load.request_rate);
  load.ignore_eos = !args.has("no-ignore-eos");
  load.temperature = args.number("temperature", 0.0);
  load.timeout_s = args.number("timeout", 600);
  if (!(load.timeout_s > 0)) fail("option --timeout: expected seconds > 0, found ", load.timeout_s);
  load.seed = w.seed;
  load.model = args.has("model") ? args.str("model") : bench::first_served_model(load.url, load.api_key);
  bench::Slo objectives{slo(args, "slo-ttft-ms"), slo(args, "slo-tpot-ms"), slo(args, "slo-e2e-ms")};
  const std::string plots = args.str("plots", "on");
  if (plots != "on" && plots != "off") fail("option --plots: expected on or off, found '", plots, "'");
  if (args.has("plots") && !args.has("out")) fail("option --plots: the plot goes beside the JSON of --out, which is missing");
  const int64_t warmup = at_least(args, "warmup", 0, 0);

  if (warmup > 0) {
    bench::WorkloadConfig ww = w;
    ww.num_prompts = warmup;
    ww.seed = w.seed + 1;
    bench::LoadConfig wl = load;
    wl.request_rate = std::numeric_limits<double>::infinity();
    std::fprintf(stderr, "bench serve: %lld warm-up requests\n", static_cast<long long>(warmup));
    bench::run_load(wl, bench::make_workload(ww));
  }
  std::fprintf(stderr, "bench serve: %lld requests to %s (%s), concurrency %lld, rate %s\n",
               static_cast<long long>(w.num_prompts), load.url.c_str(), load.chat ? "chat" : "completions",
               static_cast<long long>(load.concurrency),
               std::isfinite(load.request_rate) ? (std::to_string(load.request_rate) + " req/s").c_str() : "inf");
  const bench::LoadResult result = bench::run_load(load, prompts);
  const bench::ServeReport report = bench::summarize(result, objectives);
  std::fputs(bench::format_report(report).c_str(), stdout);

  if (args.has("out")) {
    nlohmann::ordered_json config;
    config["endpoint"] = load.chat ? "/v1/chat/completions" : "/v1/completions";
    config["model"] = load.model;
    config["label"] = args.str("label");
    config["dataset"] = w.dataset;
    config["num_prompts"] = w.num_prompts;
    config["input_len"] = w.input_len;
    config["output_len"] = w.output_len;
    config["prefix_len"] = w.prefix_len;
    config["num_prefixes"] = w.num_prefixes;
    config["range_ratio"] = w.range_ratio;
    config["token_ids"] = {w.token_lo, w.token_hi};
    config["concurrency"] = load.concurrency;
    config["request_rate"] = std::isfinite(load.request_rate) ? nlohmann::ordered_json(load.request_rate)
                                                              : nlohmann::ordered_json("inf");
    config["ignore_eos"] = load.ignore_eos;
    config["temperature"] = load.temperature;
    config["warmup"] = warmup;
    config["seed"] = w.seed;
    config["slo_ms"] = {{"ttft", objectives.ttft_ms ? nlohmann::ordered_json(*objectives.ttft_ms) : nullptr},
                        {"tpot", objectives.tpot_ms ? nlohmann::ordered_json(*objectives.tpot_ms) : nullptr},
                        {"e2e", objectives.e2e_ms ? nlohmann::ordered_json(*objectives.e2e_ms) : nullptr}};
    nlohmann::ordered_json j;
    j["benchmark"] = "serve";
    j["device"] = bench::describe_device();
    j["date"] = utc_now();
    j["commit"] = args.has("commit") ? args.str("commit") : git_commit();
    j["config"] = config;
    j["results"] = bench::report_json(report);
    std::ofstream out(args.str("out"));
    if (!out) fail("option --out: cannot write '", args.str("out"), "'");
    out << j.dump(2) << "\n";
    if (!out) fail("option --out: error while writing '", args.str("out"), "'");
    out.close();
    if (plots == "on") draw_latency_plot(result, j, args.str("out"));
  }
  return report.failed > 0 ? 1 : 0;
}

}  // namespace strata::cli
