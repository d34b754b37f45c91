#pragma once
// What /metrics reports, in the Prometheus text exposition format (version 0.0.4): request and token counters,
// latency histograms (time to first token, time per output token, end to end), and the engine's gauges (running
// and waiting sequences, state-pool usage, preemptions). Thread-safe; names start with "strata_".
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/engine.h"
#include "text/grammar/grammar_cache.h"

namespace strata::server {

// Cumulative buckets: counts[i] = observations ≤ bounds[i]; the +Inf bucket is `count`.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<int64_t>& counts() const { return counts_; }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  double sum_ = 0;
};

// A number as Prometheus reads it: shortest round-trip decimal, "+Inf", "-Inf", "NaN".
std::string prometheus_number(double value);

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  void request_received();  // a completion request was admitted to the engine
  // A request answered: its choices' finish reasons and its token usage.
  void request_finished(const std::vector<std::string>& finish_reasons, int64_t prompt_tokens, int64_t generation_tokens);
  void request_failed(int status);  // an HTTP error response (4xx/5xx) to any route
  void observe_time_to_first_token(double seconds);
  void observe_time_per_output_token(double seconds);
  void observe_e2e_latency(double seconds);
  // Prefill/decode disaggregation, decode side: a prompt's state brought from a prefill replica, or a transfer that
  // failed ("connect", "timeout", "cancelled", "refused", "protocol": the prompt was computed here instead).
  void transfer_succeeded(int64_t bytes, double seconds);
  void transfer_failed(const std::string& kind);

  // The whole exposition. `stats` are the engine's; `max_sequences` is the state pool's slot count.
  // `cache`: the prefix cache's counters, when it is on; `grammars`: the grammar compile cache's, once built.
  std::string render(const engine::EngineStats& stats, int64_t max_sequences, int64_t open_connections,
                     const cache::PrefixCacheStats* cache = nullptr,
                     const text::grammar::GrammarCacheStats* grammars = nullptr) const;

 private:
  mutable std::mutex mu_;
  std::string model_name_;
  int64_t requests_received_ = 0, prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, int64_t> finished_by_reason_;
  std::map<int, int64_t> errors_by_status_;
  Histogram ttft_, tpot_, e2e_;
  int64_t transfers_ok_ = 0, transfer_bytes_ = 0;
  double transfer_seconds_ = 0;
  std::map<std::string, int64_t> transfers_failed_;
};

}  // namespace strata::server
