#include "disagg/tcp_state_transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "bench/serve_client.h"
#include "core/error.h"

namespace strata::disagg {

const char* to_string(TransferError::Kind kind) {
  switch (kind) {
    case TransferError::Kind::Connect: return "connect";
    case TransferError::Kind::Timeout: return "timeout";
    case TransferError::Kind::Cancelled: return "cancelled";
    case TransferError::Kind::Refused: return "refused";
    case TransferError::Kind::Protocol: return "protocol";
  }
  return "protocol";
}

namespace {

using Clock = std::chrono::steady_clock;
using Kind = TransferError::Kind;

[[noreturn]] void transfer_fail(Kind kind, const std::string& message) { throw TransferError(kind, message); }

class Socket {
 public:
  Socket(const std::string& peer, const TransferControl& control) : peer_(peer), control_(control) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  void connect(const std::string& host, const std::string& port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
      transfer_fail(Kind::Connect, cat(peer_, ": cannot resolve ", host, ": ", ::gai_strerror(rc)));
    std::string why = "no address";
    for (addrinfo* a = found; a; a = a->ai_next) {
      fd_ = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd_ < 0) continue;
      if (::connect(fd_, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
        try {
          wait(POLLOUT, "connecting");
        } catch (...) {
          ::freeaddrinfo(found);
          throw;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) {
          ::freeaddrinfo(found);
          return;
        }
        why = std::strerror(err);
      } else {
        why = std::strerror(errno);
      }
      ::close(fd_);
      fd_ = -1;
    }
    ::freeaddrinfo(found);
    transfer_fail(Kind::Connect, cat(peer_, ": cannot connect: ", why));
  }

  void send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait(POLLOUT, "sending the order");
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      transfer_fail(Kind::Connect, cat(peer_, ": sending the order: ", std::strerror(errno)));
    }
  }

  // Appends what arrives to `buffer`; false at the end of the stream.
  bool receive(std::string& buffer, const char* doing) {
    char chunk[1 << 16];
    for (;;) {
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) {
        buffer.append(chunk, static_cast<size_t>(n));
        return true;
      }
      if (n == 0) return false;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait(POLLIN, doing);
        continue;
      }
      if (errno == EINTR) continue;
      transfer_fail(Kind::Protocol, cat(peer_, ": ", doing, ": ", std::strerror(errno)));
    }
  }

 private:
  void wait(short events, const char* doing) {
    for (;;) {
      if (control_.cancelled && control_.cancelled()) transfer_fail(Kind::Cancelled, cat(peer_, ": cancelled while ", doing));
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(control_.deadline - Clock::now()).count();
      if (left <= 0) transfer_fail(Kind::Timeout, cat(peer_, ": the deadline passed while ", doing));
      pollfd p{fd_, events, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 50)));
      if (rc > 0) return;
      if (rc < 0 && errno != EINTR) transfer_fail(Kind::Protocol, cat(peer_, ": poll: ", std::strerror(errno)));
    }
  }

  const std::string& peer_;
  const TransferControl& control_;
  int fd_ = -1;
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int64_t to_int(std::string_view text, const std::string& peer, const char* what) {
  int64_t v = 0;
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.remove_suffix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0)
    transfer_fail(Kind::Protocol, cat(peer, ": ", what, " is not a count: '", text, "'"));
  return v;
}

struct Head {
  int status = 0;
  int64_t content_length = -1;
  bool chunked = false;
  int64_t state_tokens = -1, cached_tokens = 0;
};

Head parse_head(std::string_view head, const std::string& peer) {
  Head h;
  const size_t line_end = head.find("\r\n");
  const std::string_view status_line = head.substr(0, line_end);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
    transfer_fail(Kind::Protocol, cat(peer, ": not an HTTP response: '", status_line.substr(0, 60), "'"));
  h.status = static_cast<int>(to_int(status_line.substr(9, 3), peer, "the status"));
  size_t at = line_end + 2;
  while (at < head.size()) {
    const size_t end = head.find("\r\n", at);
    const std::string_view line = head.substr(at, end == std::string_view::npos ? head.size() - at : end - at);
    at = end == std::string_view::npos ? head.size() : end + 2;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name = lower(line.substr(0, colon));
    const std::string_view value = line.substr(colon + 1);
    if (name == "content-length") h.content_length = to_int(value, peer, "Content-Length");
    else if (name == "transfer-encoding") h.chunked = lower(value).find("chunked") != std::string::npos;
    else if (name == lower(kStateTokensHeader)) h.state_tokens = to_int(value, peer, kStateTokensHeader.data());
    else if (name == lower(kCachedTokensHeader)) h.cached_tokens = to_int(value, peer, kCachedTokensHeader.data());
  }
  return h;
}

// A chunked body (RFC 9112 §7.1) without trailers' meaning; nullopt while incomplete.
std::optional<std::string> dechunk(std::string_view raw, const std::string& peer) {
  std::string body;
  size_t at = 0;
  for (;;) {
    const size_t line_end = raw.find("\r\n", at);
    if (line_end == std::string_view::npos) return std::nullopt;
    std::string_view size_text = raw.substr(at, line_end - at);
    if (const size_t semi = size_text.find(';'); semi != std::string_view::npos) size_text = size_text.substr(0, semi);
    uint64_t size = 0;
    const auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (ec != std::errc() || end != size_text.data() + size_text.size())
      transfer_fail(Kind::Protocol, cat(peer, ": a bad chunk size '", size_text, "'"));
    at = line_end + 2;
    if (size == 0) return raw.find("\r\n", at) == std::string_view::npos ? std::nullopt : std::optional(body);
    if (raw.size() < at + size + 2) return std::nullopt;
    body.append(raw.substr(at, size));
    at += size + 2;
  }
}

}  // namespace

PrefilledState TcpStateTransport::prefill(const std::string& peer, const PrefillOrder& order,
                                          const TransferControl& control) {
  bench::ServerUrl url;
  try {
    url = bench::parse_server_url(peer);
  } catch (const Error& e) {
    transfer_fail(Kind::Connect, cat("prefill replica '", peer, "': ", e.what()));
  }
  Socket socket(peer, control);
  socket.connect(url.host, url.port);
  const std::string body = to_json(order);
  std::string request = cat("POST ", url.prefix, kPrefillPath, " HTTP/1.1\r\nHost: ", url.host, ":", url.port,
                            "\r\nContent-Type: application/json\r\nAccept: application/octet-stream\r\nContent-Length: ",
                            body.size(), "\r\nConnection: close\r\n");
  if (!control.authorization.empty()) request += cat("Authorization: ", control.authorization, "\r\n");
  request += "\r\n";
  request += body;
  socket.send_all(request);

  std::string raw;
  size_t head_end = std::string::npos;
  while ((head_end = raw.find("\r\n\r\n")) == std::string::npos) {
    if (!socket.receive(raw, "waiting for the prefill"))
      transfer_fail(Kind::Protocol, cat(peer, ": the connection closed before a response"));
    if (raw.size() > (64u << 10) && raw.find("\r\n\r\n") == std::string::npos)
      transfer_fail(Kind::Protocol, cat(peer, ": a response head over 64 KiB"));
  }
  const Head head = parse_head(std::string_view(raw).substr(0, head_end + 2), peer);
  raw.erase(0, head_end + 4);
  if (head.content_length > control.max_state_bytes)
    transfer_fail(Kind::Protocol, cat(peer, ": a state of ", head.content_length, " bytes, over the limit of ",
                                      control.max_state_bytes));
  if (head.content_length >= 0) raw.reserve(static_cast<size_t>(head.content_length));
  std::optional<std::string> body_bytes;
  for (;;) {
    if (head.chunked) {
      if ((body_bytes = dechunk(raw, peer))) break;
    } else if (head.content_length >= 0 && static_cast<int64_t>(raw.size()) >= head.content_length) {
      raw.resize(static_cast<size_t>(head.content_length));
      body_bytes = std::move(raw);
      break;
    }
    if (static_cast<int64_t>(raw.size()) > control.max_state_bytes)
      transfer_fail(Kind::Protocol, cat(peer, ": a state over the limit of ", control.max_state_bytes, " bytes"));
    if (!socket.receive(raw, "receiving the state")) {
      if (head.content_length < 0 && !head.chunked) {  // delimited by the end of the connection
        body_bytes = std::move(raw);
        break;
      }
      transfer_fail(Kind::Protocol, cat(peer, ": the connection closed in the middle of the state"));
    }
  }
  if (head.status != 200) {
    // The prefill replica's OpenAI-style error body, shortened for logs.
    transfer_fail(Kind::Refused, cat(peer, ": HTTP ", head.status, ": ", body_bytes->substr(0, 300)));
  }
  if (head.state_tokens != static_cast<int64_t>(order.tokens.size()))
    transfer_fail(Kind::Protocol, cat(peer, ": a state of ", head.state_tokens, " tokens for an order of ",
                                      order.tokens.size()));
  PrefilledState out;
  out.state = std::make_shared<const std::string>(std::move(*body_bytes));
  out.tokens = head.state_tokens;
  out.cached_tokens = std::min(head.cached_tokens, head.state_tokens);
  return out;
}

}  // namespace strata::disagg
