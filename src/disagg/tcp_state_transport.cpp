#include "disagg/tcp_state_transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

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
  std::string shared_floats;  // the shared region's handle, on a same-host transfer
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
    else if (name == lower(kSharedFloatsHeader)) {
      std::string_view v = value;
      while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == '\r')) v.remove_suffix(1);
      h.shared_floats = std::string(v);
    }
  }
  return h;
}

// A chunked body (RFC 9112 §7.1) decoded as it arrives; chunk extensions and trailers are skipped.
class Dechunker {
 public:
  explicit Dechunker(const std::string& peer) : peer_(peer) {}
  // Takes what `raw` holds of the body and appends its data to `out`, leaving in `raw` only a part not yet whole.
  void feed(std::string& raw, std::string& out) {
    size_t at = 0;
    while (!done_) {
      if (left_ > 0) {
        const size_t n = std::min<size_t>(left_, raw.size() - at);
        out.append(raw, at, n);
        at += n;
        left_ -= n;
        if (left_ > 0) break;
        after_data_ = true;
      }
      const size_t line_end = raw.find("\r\n", at);
      if (line_end == std::string::npos) break;
      const std::string_view line = std::string_view(raw).substr(at, line_end - at);
      at = line_end + 2;
      if (after_data_) {  // the CRLF that ends a chunk's data
        if (!line.empty()) transfer_fail(Kind::Protocol, cat(peer_, ": a chunk longer than its size"));
        after_data_ = false;
        continue;
      }
      if (in_trailers_) {
        if (line.empty()) done_ = true;
        continue;
      }
      std::string_view size_text = line.substr(0, line.find(';'));
      uint64_t size = 0;
      const auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
      if (size_text.empty() || ec != std::errc() || end != size_text.data() + size_text.size())
        transfer_fail(Kind::Protocol, cat(peer_, ": a bad chunk size '", size_text, "'"));
      if (size == 0) in_trailers_ = true;
      else left_ = size;
    }
    raw.erase(0, at);
  }
  bool done() const { return done_; }

 private:
  const std::string& peer_;
  uint64_t left_ = 0;  // data bytes of the current chunk still to come
  bool after_data_ = false, in_trailers_ = false, done_ = false;
};

}  // namespace

namespace {

// Connects to `peer` and sends `body` as a POST to `path`.
std::unique_ptr<Socket> post_json(const std::string& peer, std::string_view path, const std::string& body,
                                  const TransferControl& control, std::string_view accept) {
  bench::ServerUrl url;
  try {
    url = bench::parse_server_url(peer);
  } catch (const Error& e) {
    transfer_fail(Kind::Connect, cat("prefill replica '", peer, "': ", e.what()));
  }
  auto socket = std::make_unique<Socket>(peer, control);
  socket->connect(url.host, url.port);
  std::string request = cat("POST ", url.prefix, path, " HTTP/1.1\r\nHost: ", url.host, ":", url.port,
                            "\r\nContent-Type: application/json\r\nAccept: ", accept, "\r\nContent-Length: ",
                            body.size(), "\r\nConnection: close\r\n");
  if (!control.authorization.empty()) request += cat("Authorization: ", control.authorization, "\r\n");
  request += "\r\n";
  request += body;
  socket->send_all(request);
  return socket;
}

// Reads the response's head; `raw` keeps what came after it.
Head read_head(Socket& socket, std::string& raw, const std::string& peer, const char* doing) {
  size_t head_end = std::string::npos;
  while ((head_end = raw.find("\r\n\r\n")) == std::string::npos) {
    if (!socket.receive(raw, doing)) transfer_fail(Kind::Protocol, cat(peer, ": the connection closed before a response"));
    if (raw.size() > (64u << 10) && raw.find("\r\n\r\n") == std::string::npos)
      transfer_fail(Kind::Protocol, cat(peer, ": a response head over 64 KiB"));
  }
  const Head head = parse_head(std::string_view(raw).substr(0, head_end + 2), peer);
  raw.erase(0, head_end + 4);
  return head;
}

}  // namespace

PrefilledState TcpStateTransport::prefill(const std::string& peer, const PrefillOrder& order,
                                          const TransferControl& control, engine::StateStream& into) {
  const std::unique_ptr<Socket> connection = post_json(peer, kPrefillPath, to_json(order), control, "application/octet-stream");
  Socket& socket = *connection;
  std::string raw;
  const Head head = read_head(socket, raw, peer, "waiting for the prefill");
  if (head.content_length > control.max_state_bytes)
    transfer_fail(Kind::Protocol, cat(peer, ": a state of ", head.content_length, " bytes, over the limit of ",
                                      control.max_state_bytes));
  const bool ok = head.status == 200;
  if (ok && head.state_tokens != static_cast<int64_t>(order.tokens.size()))
    transfer_fail(Kind::Protocol, cat(peer, ": a state of ", head.state_tokens, " tokens for an order of ",
                                      order.tokens.size()));
  if (ok) {
    into.set_cached_tokens(std::min(head.cached_tokens, head.state_tokens));
    if (!head.shared_floats.empty()) {
      if (!order.shared_floats)
        transfer_fail(Kind::Protocol, cat(peer, ": a shared region (", kSharedFloatsHeader, ") that was not asked for"));
      into.set_shared_floats(head.shared_floats);
    }
  }

  // The body, handed on as it arrives (an error's is kept for the message).
  Dechunker chunks(peer);
  std::string data, error_body;
  int64_t received = 0;
  auto deliver = [&] {
    if (data.empty()) return;
    received += static_cast<int64_t>(data.size());
    if (received > control.max_state_bytes)
      transfer_fail(Kind::Protocol, cat(peer, ": a state over the limit of ", control.max_state_bytes, " bytes"));
    if (ok) into.append(std::move(data));
    else if (error_body.size() < 4096) error_body += data;
    data.clear();
  };
  for (;;) {
    if (head.chunked) {
      chunks.feed(raw, data);
      deliver();
      if (chunks.done()) break;
    } else {
      const size_t take = head.content_length >= 0
                              ? std::min<size_t>(raw.size(), static_cast<size_t>(head.content_length - received))
                              : raw.size();
      data.assign(raw, 0, take);
      raw.clear();
      deliver();
      if (head.content_length >= 0 && received >= head.content_length) break;
    }
    if (!socket.receive(raw, "receiving the state")) {
      if (head.content_length < 0 && !head.chunked) break;  // delimited by the end of the connection
      transfer_fail(Kind::Protocol, cat(peer, ": the connection closed in the middle of the state (", received,
                                        " bytes in)"));
    }
  }
  if (!ok) transfer_fail(Kind::Refused, cat(peer, ": HTTP ", head.status, ": ", error_body.substr(0, 300)));
  PrefilledState out;
  out.tokens = head.state_tokens;
  out.cached_tokens = std::min(head.cached_tokens, head.state_tokens);
  out.bytes = received;
  return out;
}

void TcpStateTransport::release(const std::string& peer, const std::string& handle, const TransferControl& control) {
  const std::unique_ptr<Socket> socket = post_json(peer, kReleasePath, release_json(handle), control, "application/json");
  std::string raw;
  const Head head = read_head(*socket, raw, peer, "waiting for the release's answer");
  if (head.status != 200) transfer_fail(Kind::Refused, cat(peer, ": the release of ", handle, ": HTTP ", head.status));
}

}  // namespace strata::disagg
