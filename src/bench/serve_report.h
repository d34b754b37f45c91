#pragma once
// What a serving benchmark measured, as numbers: latency distributions (TTFT, TPOT, ITL, E2E — mean, median,
// p90, p99), request and token throughput, and goodput (requests/s that met every SLO), as vLLM's
// benchmark_serving reports them. Percentiles interpolate linearly between ranks (numpy's default).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/serve_client.h"

namespace strata::bench {

struct Distribution {
  int64_t count = 0;
  double mean = 0, median = 0, p90 = 0, p99 = 0, std = 0, max = 0;
};
// Over `values` (any order); all zero when empty.
Distribution distribution(std::vector<double> values);
// The q-th percentile (0–100) of sorted values, linearly interpolated.
double percentile(const std::vector<double>& sorted, double q);

// Service-level objectives, in milliseconds; a request is "good" when it meets every one given.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2e_ms;
  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};

struct ServeReport {
  int64_t completed = 0, failed = 0, good = 0;
  double duration_s = 0;
  int64_t input_tokens = 0, output_tokens = 0;  // of the completed requests (usage)
  int64_t cached_input_tokens = 0;              // of input_tokens, those the server's prefix cache held
  double request_throughput = 0;                // completed requests/s
  double output_throughput = 0;                 // generated (streamed) tokens/s
  double total_token_throughput = 0;            // (prompt + generated) tokens/s
  std::optional<double> goodput;                // good requests/s, when an SLO is given
  int64_t max_in_flight = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  std::vector<std::string> errors;  // the first few distinct failure messages
};

ServeReport summarize(const LoadResult& result, const Slo& slo);

nlohmann::ordered_json report_json(const ServeReport& report);
// The human-readable table `strata bench serve` prints.
std::string format_report(const ServeReport& report);

// The machine, without its name: CPU model and thread count, GPU models when the NVIDIA driver lists any.
nlohmann::ordered_json describe_device();

}  // namespace strata::bench
