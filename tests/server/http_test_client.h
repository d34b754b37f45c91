#pragma once
// A tiny blocking HTTP/1.1 client over a raw socket, for driving the server in tests: it writes requests byte for
// byte and reads responses (Content-Length or chunked), so the tests see exactly what a client would.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::test {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

inline std::string http_request(const std::string& method, const std::string& path, const std::string& body = "",
                                const std::vector<std::string>& extra_headers = {}) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: localhost\r\n";
  for (const std::string& h : extra_headers) r += h + "\r\n";
  if (!body.empty() || method == "POST")
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

class HttpTestClient {
 public:
  explicit HttpTestClient(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
      throw std::runtime_error("connect() failed");
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~HttpTestClient() { close(); }
  HttpTestClient(const HttpTestClient&) = delete;
  HttpTestClient& operator=(const HttpTestClient&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send(const std::string& data) {
    size_t at = 0;
    while (at < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + at, data.size() - at, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send() failed");
      at += static_cast<size_t>(n);
    }
  }

  // Reads one whole response. Throws on timeout or when the server closes before it is complete.
  HttpReply read_reply(double timeout_s = 60) {
    HttpReply reply;
    const std::string head = read_until("\r\n\r\n", timeout_s);
    const size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    reply.status = std::stoi(status_line.substr(status_line.find(' ') + 1, 3));
    size_t at = line_end + 2;
    while (at < head.size()) {
      const size_t end = head.find("\r\n", at);
      const std::string line = head.substr(at, end - at);
      at = end + 2;
      if (line.empty()) break;
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      size_t v = colon + 1;
      while (v < line.size() && line[v] == ' ') ++v;
      reply.headers[name] = line.substr(v);
    }
    if (reply.status == 100) return read_reply(timeout_s);
    if (reply.headers.count("content-length")) {
      reply.body = read_exactly(std::stoul(reply.headers["content-length"]), timeout_s);
    } else if (reply.headers.count("transfer-encoding")) {
      for (;;) {
        const std::string size_line = read_until("\r\n", timeout_s);
        const size_t size = std::stoul(size_line, nullptr, 16);
        if (size == 0) {
          read_until("\r\n", timeout_s);  // no trailers
          break;
        }
        reply.body += read_exactly(size, timeout_s);
        read_exactly(2, timeout_s);
      }
    } else {
      reply.body = read_to_close(timeout_s);
    }
    return reply;
  }

  // Reads whatever arrives within `timeout_s` (at least one byte unless the connection is closed or times out).
  std::string read_some(double timeout_s = 60) {
    std::string out;
    out.swap(pending_);
    if (!out.empty()) return out;
    if (!fill(timeout_s)) return {};
    out.swap(pending_);
    return out;
  }

  // Reads until `needle` has arrived (kept for later reads); false on EOF or timeout. A response's head and body
  // may arrive in separate packets, so tests wait for what they expect rather than for the first bytes.
  bool wait_for(const std::string& needle, double timeout_s = 60) {
    while (pending_.find(needle) == std::string::npos)
      if (!fill(timeout_s)) return false;
    return true;
  }

  // True when the server has closed the connection (reads EOF within the timeout).
  bool closed_by_server(double timeout_s = 5) {
    pending_.clear();
    while (fill(timeout_s)) pending_.clear();
    return eof_;
  }

 private:
  // Appends what the socket has to pending_; false on EOF or timeout.
  bool fill(double timeout_s) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    pending_.append(buf, static_cast<size_t>(n));
    return true;
  }
  std::string read_until(const std::string& delimiter, double timeout_s) {
    for (;;) {
      const size_t at = pending_.find(delimiter);
      if (at != std::string::npos) {
        std::string out = pending_.substr(0, at + delimiter.size());
        pending_.erase(0, at + delimiter.size());
        return out;
      }
      if (!fill(timeout_s)) throw std::runtime_error("connection closed or timed out while reading a response");
    }
  }
  std::string read_exactly(size_t n, double timeout_s) {
    while (pending_.size() < n)
      if (!fill(timeout_s)) throw std::runtime_error("connection closed or timed out while reading a body");
    std::string out = pending_.substr(0, n);
    pending_.erase(0, n);
    return out;
  }
  std::string read_to_close(double timeout_s) {
    while (fill(timeout_s)) {
    }
    std::string out;
    out.swap(pending_);
    return out;
  }

  int fd_ = -1;
  std::string pending_;
  bool eof_ = false;
};

// The JSON payloads of a server-sent-event body ("data: X\n\n" each); "[DONE]" stays a string.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) throw std::runtime_error("unterminated SSE event: " + body.substr(at));
    const std::string event = body.substr(at, end - at);
    if (event.rfind("data: ", 0) != 0) throw std::runtime_error("SSE event without 'data: ': " + event);
    out.push_back(event.substr(6));
    at = end + 2;
  }
  return out;
}

}  // namespace strata::test
