#include "bench/serve_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"

namespace strata::bench {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

Distribution distribution(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int64_t>(values.size());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  double sq = 0;
  for (double v : values) sq += (v - d.mean) * (v - d.mean);
  d.std = std::sqrt(sq / static_cast<double>(values.size()));
  d.median = percentile(values, 50);
  d.p90 = percentile(values, 90);
  d.p99 = percentile(values, 99);
  d.max = values.back();
  return d;
}

ServeReport summarize(const LoadResult& result, const Slo& slo) {
  ServeReport r;
  r.duration_s = result.duration_s;
  r.max_in_flight = result.max_in_flight;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& q : result.requests) {
    if (!q.ok) {
      ++r.failed;
      if (r.errors.size() < 5 && std::find(r.errors.begin(), r.errors.end(), q.error) == r.errors.end())
        r.errors.push_back(q.error);
      continue;
    }
    ++r.completed;
    r.input_tokens += q.prompt_tokens;
    r.cached_input_tokens += q.cached_tokens;
    r.output_tokens += q.output_tokens;
    ttft.push_back(q.ttft_s * 1e3);
    e2e.push_back(q.e2e_s * 1e3);
    // Time per output token after the first; a one-token answer has none.
    std::optional<double> q_tpot;
    if (q.output_tokens > 1) {
      q_tpot = (q.e2e_s - q.ttft_s) * 1e3 / static_cast<double>(q.output_tokens - 1);
      tpot.push_back(*q_tpot);
    }
    for (double gap : q.itl_s) itl.push_back(gap * 1e3);
    const bool good = (!slo.ttft_ms || q.ttft_s * 1e3 <= *slo.ttft_ms) &&
                      (!slo.tpot_ms || !q_tpot || *q_tpot <= *slo.tpot_ms) &&
                      (!slo.e2e_ms || q.e2e_s * 1e3 <= *slo.e2e_ms);
    r.good += good;
  }
  const double d = result.duration_s > 0 ? result.duration_s : 1.0;
  r.request_throughput = static_cast<double>(r.completed) / d;
  r.output_throughput = static_cast<double>(r.output_tokens) / d;
  r.total_token_throughput = static_cast<double>(r.input_tokens + r.output_tokens) / d;
  if (slo.any()) r.goodput = static_cast<double>(r.good) / d;
  r.ttft_ms = distribution(std::move(ttft));
  r.tpot_ms = distribution(std::move(tpot));
  r.itl_ms = distribution(std::move(itl));
  r.e2e_ms = distribution(std::move(e2e));
  return r;
}

namespace {

nlohmann::ordered_json distribution_json(const Distribution& d) {
  return {{"mean", d.mean}, {"median", d.median}, {"p90", d.p90}, {"p99", d.p99},
          {"std", d.std},   {"max", d.max},       {"count", d.count}};
}

}  // namespace

nlohmann::ordered_json report_json(const ServeReport& r) {
  nlohmann::ordered_json j;
  j["completed"] = r.completed;
  j["failed"] = r.failed;
  j["duration_s"] = r.duration_s;
  j["input_tokens"] = r.input_tokens;
  j["cached_input_tokens"] = r.cached_input_tokens;
  j["prefix_cache_hit_rate"] =
      r.input_tokens > 0 ? static_cast<double>(r.cached_input_tokens) / static_cast<double>(r.input_tokens) : 0.0;
  j["output_tokens"] = r.output_tokens;
  j["request_throughput"] = r.request_throughput;
  j["output_token_throughput"] = r.output_throughput;
  j["total_token_throughput"] = r.total_token_throughput;
  j["goodput"] = r.goodput ? nlohmann::ordered_json(*r.goodput) : nlohmann::ordered_json(nullptr);
  j["good_requests"] = r.good;
  j["max_concurrency"] = r.max_in_flight;
  j["ttft_ms"] = distribution_json(r.ttft_ms);
  j["tpot_ms"] = distribution_json(r.tpot_ms);
  j["itl_ms"] = distribution_json(r.itl_ms);
  j["e2e_ms"] = distribution_json(r.e2e_ms);
  j["errors"] = r.errors;
  return j;
}

std::string format_report(const ServeReport& r) {
  std::string out;
  char line[160];
  const auto row = [&](const char* name, const std::string& value) {
    std::snprintf(line, sizeof line, "%-34s %s\n", name, value.c_str());
    out += line;
  };
  const auto num = [](double v, const char* fmt = "%.2f") {
    char b[64];
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  out += "============ Serving benchmark result ============\n";
  row("Successful requests:", std::to_string(r.completed));
  row("Failed requests:", std::to_string(r.failed));
  row("Maximum requests in flight:", std::to_string(r.max_in_flight));
  row("Benchmark duration (s):", num(r.duration_s));
  row("Total input tokens:", std::to_string(r.input_tokens));
  if (r.cached_input_tokens > 0)
    row("Prompt tokens from the prefix cache:",
        std::to_string(r.cached_input_tokens) + " (" +
            num(100.0 * static_cast<double>(r.cached_input_tokens) / static_cast<double>(std::max<int64_t>(1, r.input_tokens)), "%.1f") +
            "%)");
  row("Total generated tokens:", std::to_string(r.output_tokens));
  row("Request throughput (req/s):", num(r.request_throughput));
  row("Output token throughput (tok/s):", num(r.output_throughput, "%.1f"));
  row("Total token throughput (tok/s):", num(r.total_token_throughput, "%.1f"));
  if (r.goodput) row("Goodput (req/s):", num(*r.goodput) + " (" + std::to_string(r.good) + " requests met the SLOs)");
  for (const auto& [name, d] : {std::pair<const char*, const Distribution*>{"Time to first token", &r.ttft_ms},
                                {"Time per output token (excl. 1st)", &r.tpot_ms},
                                {"Inter-token latency", &r.itl_ms},
                                {"End-to-end latency", &r.e2e_ms}}) {
    out += cat("---------- ", name, " (ms) ----------\n");
    row("Mean:", num(d->mean, "%.3f"));
    row("Median:", num(d->median, "%.3f"));
    row("P90:", num(d->p90, "%.3f"));
    row("P99:", num(d->p99, "%.3f"));
  }
  out += "==================================================\n";
  for (const std::string& e : r.errors) out += "error: " + e + "\n";
  return out;
}

nlohmann::ordered_json describe_device() {
  nlohmann::ordered_json d;
  std::string cpu = "unknown";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  d["cpu"] = cpu;
  d["cpu_threads"] = std::thread::hardware_concurrency();
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  std::error_code ec;
  const std::filesystem::path nvidia = "/proc/driver/nvidia/gpus";
  if (std::filesystem::is_directory(nvidia, ec))
    for (const auto& entry : std::filesystem::directory_iterator(nvidia, ec)) {
      std::ifstream gpu(entry.path() / "information");
      for (std::string line; std::getline(gpu, line);)
        if (line.rfind("Model:", 0) == 0) {
          const size_t at = line.find_first_not_of(" \t", 6);
          gpus.push_back(at == std::string::npos ? "unknown" : line.substr(at));
        }
    }
  d["gpus"] = gpus;
  return d;
}

}  // namespace strata::bench
