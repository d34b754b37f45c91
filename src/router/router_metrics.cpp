#include "router/router_metrics.h"

#include <algorithm>

#include "server/metrics.h"

namespace strata::router {

void OverheadSamples::add(double seconds) {
  if (ring_.size() < kSamples) ring_.push_back(seconds);
  else ring_[next_] = seconds;
  next_ = (next_ + 1) % kSamples;
  ++count_;
  sum_ += seconds;
}

double OverheadSamples::quantile(double q) const {
  if (ring_.empty()) return 0;
  std::vector<double> sorted = ring_;
  const auto k = static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), sorted.end());
  return sorted[k];
}

namespace {

void family(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + server::prometheus_number(value) + "\n";
}

std::string replica_labels(const ReplicaMetrics& r) { return "replica=\"" + r.url + "\",role=\"" + r.role + "\""; }

}  // namespace

std::string RouterMetrics::render(const std::vector<ReplicaMetrics>& replicas, Policy policy, size_t index_blocks) const {
  std::string out;
  family(out, "strata_router_info", "gauge", "The routing policy (always 1).");
  sample(out, "strata_router_info", std::string("policy=\"") + policy_name(policy) + "\"", 1);

  family(out, "strata_router_replica_healthy", "gauge", "1 when the replica takes requests, 0 when ejected or not up yet.");
  for (const auto& r : replicas) sample(out, "strata_router_replica_healthy", replica_labels(r), r.healthy ? 1 : 0);
  family(out, "strata_router_replica_in_flight", "gauge", "The router's requests open on the replica.");
  for (const auto& r : replicas) sample(out, "strata_router_replica_in_flight", replica_labels(r), static_cast<double>(r.in_flight));
  const std::pair<const char*, int64_t server::LoadReport::*> reported[] = {
      {"running", &server::LoadReport::running},
      {"waiting", &server::LoadReport::waiting},
      {"free_blocks", &server::LoadReport::free_blocks},
      {"total_blocks", &server::LoadReport::total_blocks},
      {"queued_prefill_tokens", &server::LoadReport::queued_prefill_tokens},
      {"requests_in_flight", &server::LoadReport::requests_in_flight}};
  for (const auto& [field, member] : reported) {
    const std::string name = std::string("strata_router_replica_") + field;
    family(out, name, "gauge", "As the replica's last load report (GET /strata/v1/load) gave it.");
    for (const auto& r : replicas)
      if (r.reported) sample(out, name, replica_labels(r), static_cast<double>(r.report.*member));
  }
  const std::pair<const char*, int64_t ReplicaMetrics::*> counted[] = {
      {"requests_total", &ReplicaMetrics::requests},
      {"failures_total", &ReplicaMetrics::failures},
      {"ejections_total", &ReplicaMetrics::ejections},
      {"readmissions_total", &ReplicaMetrics::readmissions}};
  for (const auto& [field, member] : counted) {
    const std::string name = std::string("strata_router_replica_") + field;
    family(out, name, "counter", "Requests sent, transport failures, ejections and re-admissions, per replica.");
    for (const auto& r : replicas) sample(out, name, replica_labels(r), static_cast<double>(r.*member));
  }

  family(out, "strata_router_decisions_total", "counter", "Routing decisions, by why the replica was picked.");
  for (const auto& [reason, n] : decisions_) sample(out, "strata_router_decisions_total", "reason=\"" + reason + "\"", static_cast<double>(n));
  family(out, "strata_router_retries_total", "counter", "Requests sent again to another replica before any byte came back.");
  sample(out, "strata_router_retries_total", "", static_cast<double>(retries_));
  family(out, "strata_router_broken_streams_total", "counter", "Responses cut by a replica failure after their first byte.");
  sample(out, "strata_router_broken_streams_total", "", static_cast<double>(broken_streams_));
  family(out, "strata_router_responses_total", "counter", "Answers to clients, by HTTP status.");
  for (const auto& [status, n] : answers_)
    sample(out, "strata_router_responses_total", "status=\"" + std::to_string(status) + "\"", static_cast<double>(n));
  family(out, "strata_router_prefix_index_blocks", "gauge", "Block hashes the cache-aware index remembers.");
  sample(out, "strata_router_prefix_index_blocks", "", static_cast<double>(index_blocks));
  family(out, "strata_router_overhead_seconds", "summary",
         "The router's own time per request (request in to replica, replica's first byte to client); quantiles over the last 65536.");
  for (const double q : {0.5, 0.9, 0.99})
    sample(out, "strata_router_overhead_seconds", "quantile=\"" + server::prometheus_number(q) + "\"", overhead_.quantile(q));
  sample(out, "strata_router_overhead_seconds_sum", "", overhead_.sum());
  sample(out, "strata_router_overhead_seconds_count", "", static_cast<double>(overhead_.count()));
  return out;
}

}  // namespace strata::router
