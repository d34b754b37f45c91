#pragma once
// Starting `strata serve` replicas and a `strata route` in front of them as child processes, and reading the
// router's /metrics: what the multi-process router tests share.
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/child_process.h"
#include "server/http_test_client.h"
#include "server/served_model.h"
#include "test_util.h"

namespace strata::test {

// The port a child printed in "<marker>http://127.0.0.1:PORT" (0 when it did not within the timeout).
inline uint16_t printed_port(Child& child, const std::string& marker, double timeout_s) {
  if (!child.wait_for(marker + "http://127.0.0.1:", timeout_s)) return 0;
  if (!child.wait_for(" — ", 5)) return 0;  // the line goes on after the port
  const size_t at = child.output.find(marker + "http://127.0.0.1:") + marker.size() + 17;
  return static_cast<uint16_t>(std::stoi(child.output.substr(at)));
}

// Slow machines (sanitizers) get more time for everything that waits on a process.
inline double patience() { return kSanitized ? 4.0 : 1.0; }

// A `strata serve` of the tests' tiny model on `port` (0: any), started at once; port() waits until it listens
// (0 when it did not come up), so replicas constructed together start side by side.
struct Replica {
  Child child;
  std::optional<uint16_t> port_;
  explicit Replica(uint16_t port = 0, std::vector<std::string> extra = {})
      : child([&] {
          std::vector<std::string> args = {"serve", "--model", served_model_dir(), "--port", std::to_string(port),
                                           "--max-num-seqs", "8", "--state-memory", "96MiB", "--served-model-name", "m",
                                           "--shutdown-grace", "0"};
          args.insert(args.end(), extra.begin(), extra.end());
          return args;
        }()) {}
  uint16_t port() {
    if (!port_) port_ = printed_port(child, "listening on ", 120 * patience());
    return *port_;
  }
  std::string url() { return "http://127.0.0.1:" + std::to_string(port()); }
};

// `strata route` with `args` after "route --port 0"; port() is 0 when it did not come up.
struct RouterProcess {
  Child child;
  uint16_t port_ = 0;
  explicit RouterProcess(std::vector<std::string> args)
      : child([&] {
          args.insert(args.begin(), {"route", "--port", "0"});
          return args;
        }()) {
    port_ = printed_port(child, "strata route: listening on ", 60 * patience());
  }
  uint16_t port() const { return port_; }
};

inline HttpReply http_get(uint16_t port, const std::string& path, double timeout_s = 30) {
  HttpTestClient c(port);
  c.send(http_request("GET", path));
  return c.read_reply(timeout_s);
}

// A sample of the router's /metrics: `name{labels}` (labels as they print, e.g. replica="http://...",role="backend"),
// or -1 when absent.
inline double router_metric(uint16_t port, const std::string& name, const std::string& labels = "") {
  const std::string text = http_get(port, "/metrics").body;
  const std::string key = name + (labels.empty() ? "" : "{" + labels + "}") + " ";
  const size_t at = text.find("\n" + key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + 1 + key.size()));
}

inline std::string replica_labels(const std::string& url, const std::string& role = "backend") {
  return "replica=\"" + url + "\",role=\"" + role + "\"";
}

// Polls `ok` every 50 ms for up to `timeout_s`; true as soon as it holds.
template <typename Ok>
bool eventually(Ok ok, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ok();
}

}  // namespace strata::test
