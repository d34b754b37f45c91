#pragma once
// What the router's /metrics reports (Prometheus text, names start with "strata_router_"): per replica its health,
// the load it last reported and the router's own requests open there; decisions by policy reason; retries,
// ejections and re-admissions; answers by status; and the router's own overhead per request. I/O thread only.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "router/policy.h"
#include "server/load_report.h"
#include "server/metrics.h"

namespace strata::router {

struct ReplicaMetrics {
  std::string url, role;
  bool healthy = false;
  bool reported = false;  // has answered a load report (the report fields mean something)
  server::LoadReport report;
  int64_t in_flight = 0, requests = 0, failures = 0, ejections = 0, readmissions = 0;
  int64_t connects = 0;     // connections opened while a request waited for one
  int64_t preconnects = 0;  // spare connections opened ahead of need
};

// The router's own time per request (strata_router_overhead_seconds): from the whole request read to its last byte
// written to the replica, plus from the replica's first response byte read to that byte handed to the client's
// connection. A histogram, so a benchmark reads the quantiles of its own requests from two scrapes' difference.
std::vector<double> overhead_bounds();  // seconds: 10 µs to 100 ms, fine where the target (200 µs) lies

class RouterMetrics {
 public:
  RouterMetrics() : overhead_(overhead_bounds()) {}
  void decision(Reason reason) { ++decisions_[reason_name(reason)]; }
  void retry() { ++retries_; }
  void answered(int status) { ++answers_[status]; }
  void broken_stream() { ++broken_streams_; }
  void overhead(double seconds) { overhead_.observe(seconds); }

  std::string render(const std::vector<ReplicaMetrics>& replicas, Policy policy, size_t index_blocks) const;

 private:
  std::map<std::string, int64_t> decisions_;
  std::map<int, int64_t> answers_;
  int64_t retries_ = 0, broken_streams_ = 0;
  server::Histogram overhead_;
};

}  // namespace strata::router
