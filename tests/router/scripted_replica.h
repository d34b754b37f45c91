#pragma once
// A stand-in for a replica that answers the router with what the test scripts and records every request it gets
// (method, path, headers): for what the router *sends* — the X-Strata-Prefill header of a PD pair, retries, how many
// requests were open at once — without loading a model. It speaks just enough HTTP/1.1: keep-alive, Content-Length
// bodies. The router's behaviour against real replicas is tested with `strata serve` (route_failover_test.cpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace strata::test {

struct ScriptedRequest {
  std::string method, path, body;
  std::map<std::string, std::string> headers;  // names lower-cased
};

class ScriptedReplica {
 public:
  // A completion request's answer: the raw HTTP response to write (after `delay`); empty: close the connection.
  struct Answer {
    std::string response;
    std::chrono::milliseconds delay{0};
  };
  using Script = std::function<Answer(const ScriptedRequest&)>;

  static std::string load_report_json() {
    return R"({"running":0,"waiting":0,"free_blocks":100,"total_blocks":100,"kept_blocks":0,"queued_prefill_tokens":0,)"
           R"("requests_in_flight":0,"block_tokens":128,"cache":{"enabled":false}})";
  }
  static std::string json_response(int status, const std::string& body) {
    return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }

  explicit ScriptedReplica(Script script) : script_(std::move(script)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 64) != 0)
      throw std::runtime_error("scripted replica: cannot listen");
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~ScriptedReplica() { stop(); }

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Stops answering and closes every connection (the replica is gone: connections are refused).
  void stop() {
    if (stopping_.exchange(true)) return;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    if (acceptor_.joinable()) acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (int c : connections_) ::shutdown(c, SHUT_RDWR);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  std::vector<ScriptedRequest> completions() const {  // every request but the load reports, in arrival order
    std::lock_guard lock(mu_);
    return completions_;
  }
  int64_t load_reports() const { return load_reports_.load(); }
  int64_t max_open() const { return max_open_.load(); }  // completion requests being answered at once, at most

 private:
  void accept_loop() {
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::lock_guard lock(mu_);
      connections_.push_back(c);
      threads_.emplace_back([this, c] { serve(c); });
    }
  }

  void serve(int c) {
    std::string pending;
    char buf[8192];
    for (;;) {
      size_t head_end;
      while ((head_end = pending.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) return close_connection(c);
        pending.append(buf, static_cast<size_t>(n));
      }
      ScriptedRequest r;
      const std::string head = pending.substr(0, head_end);
      const size_t line_end = head.find("\r\n");
      const std::string line = head.substr(0, line_end);
      r.method = line.substr(0, line.find(' '));
      r.path = line.substr(r.method.size() + 1, line.rfind(' ') - r.method.size() - 1);
      size_t at = line_end == std::string::npos ? head.size() : line_end + 2;
      while (at < head.size()) {
        size_t end = head.find("\r\n", at);
        if (end == std::string::npos) end = head.size();
        const std::string h = head.substr(at, end - at);
        at = end + 2;
        const size_t colon = h.find(':');
        if (colon == std::string::npos) continue;
        std::string name = h.substr(0, colon);
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        size_t v = colon + 1;
        while (v < h.size() && h[v] == ' ') ++v;
        r.headers[name] = h.substr(v);
      }
      const size_t length = r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
      pending.erase(0, head_end + 4);
      while (pending.size() < length) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) return close_connection(c);
        pending.append(buf, static_cast<size_t>(n));
      }
      r.body = pending.substr(0, length);
      pending.erase(0, length);
      std::string response;
      if (r.path == "/strata/v1/load") {
        ++load_reports_;
        response = json_response(200, load_report_json());
      } else {
        {
          std::lock_guard lock(mu_);
          completions_.push_back(r);
        }
        const int64_t open = ++open_;
        for (int64_t m = max_open_.load(); open > m && !max_open_.compare_exchange_weak(m, open);) {
        }
        const Answer a = script_(r);
        const auto until = std::chrono::steady_clock::now() + a.delay;
        while (std::chrono::steady_clock::now() < until && !stopping_) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        --open_;
        response = a.response;
      }
      if (stopping_ || response.empty()) return close_connection(c);  // empty: drop it without a byte
      size_t sent = 0;
      while (sent < response.size()) {
        const ssize_t n = ::send(c, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return close_connection(c);
        sent += static_cast<size_t>(n);
      }
    }
  }

  void close_connection(int c) {
    std::lock_guard lock(mu_);
    for (int& x : connections_)
      if (x == c) x = -1;
    ::close(c);
  }

  Script script_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::vector<int> connections_;
  std::vector<std::thread> threads_;
  std::vector<ScriptedRequest> completions_;
  std::atomic<int64_t> load_reports_{0}, open_{0}, max_open_{0};
};

}  // namespace strata::test
