#include "router/router_metrics.h"


namespace strata::router {

std::vector<double> overhead_bounds() {
  std::vector<double> b;
  for (const double us : {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 120, 140, 160, 180, 200, 250, 300, 400, 500, 750, 1000,
                          2000, 5000, 10000, 20000, 50000, 100000})
    b.push_back(us / 1e6);  // divided, so each bound prints as its decimal (160e-6 would not)
  return b;
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
  family(out, "strata_router_replica_connects_total", "counter",
         "Connections to the replica opened while a request waited for one (none kept alive was idle).");
  for (const auto& r : replicas)
    sample(out, "strata_router_replica_connects_total", replica_labels(r), static_cast<double>(r.connects));
  family(out, "strata_router_replica_preconnects_total", "counter",
         "Spare connections to the replica opened ahead of need, so that requests rarely wait for a connect.");
  for (const auto& r : replicas)
    sample(out, "strata_router_replica_preconnects_total", replica_labels(r), static_cast<double>(r.preconnects));

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
  family(out, "strata_router_overhead_seconds", "histogram",
         "The router's own time per request: request in to replica, and replica's first byte to client.");
  for (size_t i = 0; i < overhead_.bounds().size(); ++i)
    sample(out, "strata_router_overhead_seconds_bucket", "le=\"" + server::prometheus_number(overhead_.bounds()[i]) + "\"",
           static_cast<double>(overhead_.counts()[i]));
  sample(out, "strata_router_overhead_seconds_bucket", "le=\"+Inf\"", static_cast<double>(overhead_.count()));
  sample(out, "strata_router_overhead_seconds_sum", "", overhead_.sum());
  sample(out, "strata_router_overhead_seconds_count", "", static_cast<double>(overhead_.count()));
  return out;
}

}  // namespace strata::router
