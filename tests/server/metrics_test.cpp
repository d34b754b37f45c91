// /metrics: the Prometheus text format (HELP/TYPE before samples, cumulative buckets, +Inf = count, _sum/_count).
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <sstream>

namespace strata::server {
namespace {

// name{labels} → value, for every sample line.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 3.0, 100.0}) h.observe(v);
  EXPECT_EQ(h.counts(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(h.count(), 5);
  EXPECT_DOUBLE_EQ(h.sum(), 103.65);
}

TEST(Metrics, NumbersAsPrometheusReadsThem) {
  EXPECT_EQ(prometheus_number(0.1), "0.1");
  EXPECT_EQ(prometheus_number(3), "3");
  EXPECT_EQ(prometheus_number(1e-3), "0.001");
  EXPECT_EQ(prometheus_number(1.0 / 0.0), "+Inf");
  EXPECT_EQ(prometheus_number(-1.0 / 0.0), "-Inf");
}


// `name{labels} value` in the Prometheus text format: a metric name, one brace group, a space, a number.
bool is_sample_line(const std::string& line) {
  const size_t open = line.find('{');
  const size_t close = line.find("} ");
  if (open == 0 || open == std::string::npos || close == std::string::npos || close < open) return false;
  for (size_t k = 0; k < open; ++k) {
    const char c = line[k];
    const bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
                    (k > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  const std::string value = line.substr(close + 2);
  if (value.empty()) return false;
  if (value == "+Inf" || value == "-Inf" || value == "NaN") return true;
  size_t used = 0;
  try {
    (void)std::stod(value, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == value.size();
}

TEST(Metrics, TextFormat) {
  Metrics m("tiny \"v4\"");
  m.request_received();
  m.request_finished({"stop", "length"}, 10, 7);
  m.request_failed(400);
  m.observe_time_to_first_token(0.02);
  m.observe_time_to_first_token(3.0);
  m.observe_time_per_output_token(0.004);
  m.observe_e2e_latency(1.5);
  engine::EngineStats stats;
  stats.running = 2;
  stats.waiting = 1;
  stats.used_slots = 2;
  stats.used_blocks = 5;
  stats.total_blocks = 20;
  stats.preemptions = 3;
  const std::string text = m.render(stats, 8, 4);

  // Every line is a comment or `name{labels} value`; every metric is introduced by HELP then TYPE.
  std::istringstream in(text);
  std::string line, last_type;
  std::map<std::string, std::string> types;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      EXPECT_TRUE(type == "counter" || type == "gauge" || type == "histogram") << line;
      EXPECT_EQ(types.count(name), 0u) << "declared twice: " << name;
      types[name] = type;
      last_type = name;
      continue;
    }
    EXPECT_TRUE(is_sample_line(line)) << line;
    EXPECT_EQ(line.rfind(last_type, 0), 0u) << "sample outside its metric family: " << line;
  }
  EXPECT_EQ(types["strata_time_to_first_token_seconds"], "histogram");
  EXPECT_EQ(types["strata_num_requests_running"], "gauge");
  EXPECT_EQ(types["strata_num_preemptions_total"], "counter");

  const auto s = samples(text);
  const std::string model = R"(model_name="tiny \"v4\"")";
  EXPECT_EQ(s.at("strata_num_requests_running{" + model + "}"), 2);
  EXPECT_EQ(s.at("strata_num_requests_waiting{" + model + "}"), 1);
  EXPECT_EQ(s.at("strata_state_pool_used_blocks{" + model + "}"), 5);
  EXPECT_EQ(s.at("strata_state_pool_total_slots{" + model + "}"), 8);
  EXPECT_DOUBLE_EQ(s.at("strata_state_pool_usage_ratio{" + model + "}"), 0.25);
  EXPECT_EQ(s.at("strata_num_preemptions_total{" + model + "}"), 3);
  EXPECT_EQ(s.at("strata_prompt_tokens_total{" + model + "}"), 10);
  EXPECT_EQ(s.at("strata_generation_tokens_total{" + model + "}"), 7);
  EXPECT_EQ(s.at("strata_request_success_total{" + model + ",finished_reason=\"stop\"}"), 1);
  EXPECT_EQ(s.at("strata_request_success_total{" + model + ",finished_reason=\"abort\"}"), 0);
  EXPECT_EQ(s.at("strata_http_errors_total{" + model + ",status=\"400\"}"), 1);
  const std::string ttft = "strata_time_to_first_token_seconds";
  EXPECT_EQ(s.at(ttft + "_bucket{" + model + ",le=\"0.01\"}"), 0);
  EXPECT_EQ(s.at(ttft + "_bucket{" + model + ",le=\"0.025\"}"), 1);
  EXPECT_EQ(s.at(ttft + "_bucket{" + model + ",le=\"5\"}"), 2);
  EXPECT_EQ(s.at(ttft + "_bucket{" + model + ",le=\"+Inf\"}"), 2);
  EXPECT_EQ(s.at(ttft + "_count{" + model + "}"), 2);
  EXPECT_DOUBLE_EQ(s.at(ttft + "_sum{" + model + "}"), 3.02);
  EXPECT_EQ(s.at("strata_time_per_output_token_seconds_count{" + model + "}"), 1);
  EXPECT_EQ(s.at("strata_e2e_request_latency_seconds_count{" + model + "}"), 1);
}

}  // namespace
}  // namespace strata::server
