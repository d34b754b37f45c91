#pragma once
// What the router's /metrics reports (Prometheus text, names start with "strata_router_"): per replica its health,
// the load it last reported and the router's own requests open there; decisions by policy reason; retries,
// ejections and re-admissions; answers by status; and the router's own overhead per request. Router thread only.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "router/policy.h"
#include "server/load_report.h"

namespace strata::router {

struct ReplicaMetrics {
  std::string url, role;
  bool healthy = false;
  bool reported = false;  // has answered a load report (the report fields mean something)
  server::LoadReport report;
  int64_t in_flight = 0, requests = 0, failures = 0, ejections = 0, readmissions = 0;
};

// The router's own time per request: from the whole request read to its last byte written to the replica, plus
// from the replica's first response byte read to that byte handed to the client's connection. Quantiles over the
// last kSamples requests.
class OverheadSamples {
 public:
  static constexpr size_t kSamples = 1 << 16;
  void add(double seconds);
  double quantile(double q) const;  // 0 when empty
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> ring_;
  size_t next_ = 0;
  int64_t count_ = 0;
  double sum_ = 0;
};

class RouterMetrics {
 public:
  void decision(Reason reason) { ++decisions_[reason_name(reason)]; }
  void retry() { ++retries_; }
  void answered(int status) { ++answers_[status]; }
  void broken_stream() { ++broken_streams_; }
  OverheadSamples& overhead() { return overhead_; }

  std::string render(const std::vector<ReplicaMetrics>& replicas, Policy policy, size_t index_blocks) const;

 private:
  std::map<std::string, int64_t> decisions_;
  std::map<int, int64_t> answers_;
  int64_t retries_ = 0, broken_streams_ = 0;
  OverheadSamples overhead_;
};

}  // namespace strata::router
