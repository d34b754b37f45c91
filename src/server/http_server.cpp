// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include "server/http_server.h"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <optional>
#include <thread>
#include <unordered_set>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/error.h"

namespace strata::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------------------------
// HttpRequest / HttpExchange

std::string HttpRequest::path() const { return target.substr(0, target.find('?')); }

const std::string* HttpRequest::header(std::string_view name) const {
  const auto same = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
    return true;
  };
  for (const HttpHeader& h : headers)
    if (same(h.name, name)) return &h.value;
  return nullptr;
}

HttpExchange::HttpExchange(HttpRequest request) : request_(std::move(request)) {}

void HttpExchange::push(Piece piece) {
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    if (gone_) return;
    // A piece written at once saves the writer a turn of the event loop (on a router, the first byte of each
    // answer waiting there behind every other stream's events). Under the lock: nothing may be queued meanwhile.
    if (pieces_.empty() && write_now_ && write_now_(piece)) return;
    pieces_.push_back(std::move(piece));
    wake = wake_;
  }
  if (wake) wake();
}

void HttpExchange::respond(HttpResponse response) {
  {
    std::lock_guard lock(mu_);
    if (begun_) return;
    begun_ = ended_ = true;
  }
  push({Piece::kWhole, std::move(response), {}});
}

void HttpExchange::begin_stream(int status, std::string content_type, std::vector<HttpHeader> headers) {
  {
    std::lock_guard lock(mu_);
    if (begun_) return;
    begun_ = true;
  }
  push({Piece::kHead, HttpResponse{status, std::move(content_type), {}, std::move(headers)}, {}});
}

void HttpExchange::write(std::string data) {
  {
    std::lock_guard lock(mu_);
    if (!begun_ || ended_ || data.empty()) return;
  }
  push({Piece::kData, {}, std::move(data)});
}

void HttpExchange::end_stream() {
  {
    std::lock_guard lock(mu_);
    if (!begun_ || ended_) return;
    ended_ = true;
  }
  push({Piece::kEnd, {}, {}});
}

void HttpExchange::on_peer_gone(std::function<void()> callback) {
  {
    std::lock_guard lock(mu_);
    if (!gone_) {
      on_gone_ = std::move(callback);
      return;
    }
  }
  callback();
}

bool HttpExchange::peer_gone() const {
  std::lock_guard lock(mu_);
  return gone_;
}

void HttpExchange::attach(std::function<void()> wake, std::function<bool(Piece&)> write_now) {
  bool pending = false;
  {
    std::lock_guard lock(mu_);
    wake_ = wake;
    write_now_ = std::move(write_now);
    pending = !pieces_.empty();
  }
  if (pending) wake();
}

std::vector<HttpExchange::Piece> HttpExchange::take_pieces() {
  std::lock_guard lock(mu_);
  std::vector<Piece> out;
  out.swap(pieces_);
  return out;
}

void HttpExchange::mark_peer_gone() {
  std::function<void()> callback;
  {
    std::lock_guard lock(mu_);
    if (gone_) return;
    gone_ = true;
    pieces_.clear();
    wake_ = nullptr;
    write_now_ = nullptr;
    callback = std::move(on_gone_);
  }
  if (callback) callback();
}

// ---------------------------------------------------------------------------------------------------------------
// The server and its connections

namespace {
class Connection;
}

struct HttpServer::Impl {
  HttpServerConfig cfg;
  Handler handler;
  std::atomic<bool> stopped{false};
  std::atomic<size_t> connection_count{0};
  // I/O thread only:
  bool closing = false;  // connections close once their response is complete
  std::unordered_set<Connection*> connections;
  // Declared after what connections touch in their destructors: destroying `io` destroys the coroutines that are
  // still suspended, and with them their connections.
  asio::io_context io{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  uint16_t port = 0;
  std::thread thread;

  HttpResponse error_response(int status, const std::string& message) const {
    if (cfg.error_response) return cfg.error_response(status, message);
    return HttpResponse{status, "text/plain", message + "\n", {}};
  }
  awaitable<void> accept_loop();
};

namespace {

// Logs an exception that escaped a coroutine (a bug: every I/O error is handled in place).
void report(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "strata serve: internal error in a connection: %s\n", ex.what());
  }
}

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl& server)
      : server_(server),
        socket_(std::move(socket)),
        wake_timer_(server.io),
        resume_timer_(server.io),
        watchdog_timer_(server.io),
        last_activity_(Clock::now()) {
    server_.connections.insert(this);
    ++server_.connection_count;
  }
  ~Connection() {
    server_.connections.erase(this);
    --server_.connection_count;
  }

  void start() {
    auto self = shared_from_this();
    asio::co_spawn(server_.io, read_loop(self), report);
    asio::co_spawn(server_.io, write_loop(self), report);
    asio::co_spawn(server_.io, watchdog(self), report);
  }

  bool idle() const { return !current_ && queue_.empty(); }

  // Server shutdown: an idle connection closes now, a busy one after its response.
  void close_when_idle() {
    if (idle()) finish();
    else wake();
  }

  // Closes the socket: pending reads and writes end with operation_aborted.
  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    if (current_) current_->mark_peer_gone();
    for (const Queued& q : queue_)
      if (q.handled) q.exchange->mark_peer_gone();
    wake_timer_.cancel();
    resume_timer_.cancel();
    watchdog_timer_.cancel();
  }

 private:
  struct Queued {
    std::shared_ptr<HttpExchange> exchange;
    bool keep_alive = true;
    unsigned version = 11;
    bool handled = false;  // the reader has already given it to the handler
  };

  void handle(const std::shared_ptr<HttpExchange>& exchange) {
    try {
      server_.handler(exchange);
    } catch (const std::exception& e) {
      exchange->respond(server_.error_response(500, cat("internal error: ", e.what())));
    }
  }

  void wake() { wake_timer_.cancel(); }

  awaitable<void> wait(asio::steady_timer& timer, Clock::time_point until = Clock::time_point::max()) {
    timer.expires_at(until);
    beast::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }

  // The end of the conversation from our side: no more responses. Half-close so the client reads everything
  // sent (closing at once could turn unread request bytes into a reset that destroys the last response), then
  // close for good when the client closes or after a short grace.
  void finish() {
    if (closed_ || finishing_) return;
    finishing_ = true;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    close_deadline_ = Clock::now() + std::chrono::seconds(2);
    wake();
    watchdog_timer_.cancel();
  }

  void client_gone() {
    peer_gone_ = true;
    if (current_) current_->mark_peer_gone();
    close();
  }

  void enqueue_error(int status, const std::string& message) {
    auto exchange = std::make_shared<HttpExchange>(HttpRequest{});
    exchange->respond(server_.error_response(status, message));
    queue_.push_back({std::move(exchange), false, 11});
    wake();
  }

  awaitable<void> read_loop(std::shared_ptr<Connection> self) {
    (void)self;
    while (!closed_ && !finishing_) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(server_.cfg.max_body_bytes);
      parser.header_limit(static_cast<uint32_t>(server_.cfg.max_header_bytes));
      beast::error_code ec;
      co_await http::async_read_header(socket_, buffer_, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (!ec && !parser.is_done()) {
        // curl and others wait for "100 Continue" before sending a body they announced with Expect; answer it
        // when nothing else is being written.
        const auto expect = parser.get()[http::field::expect];
        if (beast::iequals(expect, "100-continue") && idle()) {
          static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
          co_await asio::async_write(socket_, asio::buffer(kContinue), asio::redirect_error(asio::use_awaitable, ec));
        }
        if (!ec) co_await http::async_read(socket_, buffer_, parser, asio::redirect_error(asio::use_awaitable, ec));
      }
      if (closed_) break;
      if (ec == http::error::body_limit) {
        enqueue_error(413, cat("the request body exceeds the limit of ", server_.cfg.max_body_bytes, " bytes"));
        break;
      }
      if (ec == http::error::header_limit) {
        enqueue_error(431, cat("the request headers exceed the limit of ", server_.cfg.max_header_bytes, " bytes"));
        break;
      }
      if (ec && ec.category() == http::make_error_code(http::error::end_of_stream).category() &&
          ec != http::error::end_of_stream && ec != http::error::partial_message) {
        enqueue_error(400, cat("malformed HTTP request (", ec.message(), ")"));
        break;
      }
      if (ec) {
        client_gone();
        co_return;
      }
      last_activity_ = Clock::now();
      http::request<http::string_body> req = parser.release();
      HttpRequest request;
      request.received = last_activity_;
      request.method = std::string(req.method_string());
      request.target = std::string(req.target());
      for (const auto& field : req) request.headers.push_back({std::string(field.name_string()), std::string(field.value())});
      request.body = std::move(req.body());
      const bool keep_alive = req.keep_alive();
      // On an idle connection the handler has the request now, not on the writer's next turn of the event loop
      // (behind whatever else is queued there); a pipelined request waits for the responses before it, as before.
      const bool now = idle();
      auto exchange = std::make_shared<HttpExchange>(std::move(request));
      queue_.push_back({exchange, keep_alive, req.version(), now});
      if (now) handle(exchange);
      wake();
      if (!keep_alive) break;
      // Pipelined requests wait here, a few at most.
      while (queue_.size() >= 4 && !closed_) co_await wait(resume_timer_);
    }
    // No more requests on this connection; keep reading (and dropping) only to notice the client leaving.
    char scratch[512];
    while (!closed_) {
      beast::error_code ec;
      co_await socket_.async_read_some(asio::buffer(scratch), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (!closed_) client_gone();
        co_return;
      }
    }
  }

  awaitable<void> write_loop(std::shared_ptr<Connection> self) {
    std::weak_ptr<Connection> weak = self;
    asio::io_context& io = server_.io;
    while (!closed_) {
      while (queue_.empty() && !closed_ && !finishing_) co_await wait(wake_timer_);
      if (queue_.empty() || closed_) break;
      Queued q = std::move(queue_.front());
      queue_.pop_front();
      resume_timer_.cancel();
      current_ = q.exchange;
      current_->attach([weak, &io] {
        // On the I/O thread (the server answering from its event loop), wake the writer at once; from any other
        // thread, by way of the loop.
        if (io.get_executor().running_in_this_thread()) {
          if (auto c = weak.lock()) c->wake();
          return;
        }
        asio::post(io, [weak] {
          if (auto c = weak.lock()) c->wake();
        });
      }, [weak, &io](HttpExchange::Piece& piece) {
        if (!io.get_executor().running_in_this_thread()) return false;
        const auto c = weak.lock();
        return c && c->write_now(piece);
      });
      if (!q.handled && !current_->request().method.empty()) handle(current_);
      const bool write_ok = co_await write_response(q);
      current_.reset();
      last_activity_ = Clock::now();
      watchdog_timer_.cancel();
      if (!write_ok || closed_) break;
      if (!q.keep_alive || server_.closing) {
        finish();
        break;
      }
    }
  }

  // Sends what the socket takes at once, without waiting (bytes sent; would-block is no error). A streamed piece
  // nearly always fits the send buffer: then it costs one send() and no round trip through the event loop, and
  // only a remainder is left to async_write.
  template <class Buffers>
  size_t send_now(const Buffers& buffers, beast::error_code& ec) {
    if (!socket_.non_blocking()) socket_.non_blocking(true, ec);
    const size_t sent = ec ? 0 : socket_.write_some(buffers, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      ec = {};
      return 0;
    }
    return sent;
  }

  http::response<http::empty_body> stream_head(const HttpResponse& head, const Queued& q) const {
    http::response<http::empty_body> res{static_cast<http::status>(head.status), q.version};
    res.set(http::field::server, "strata");
    res.set(http::field::content_type, head.content_type);
    for (const HttpHeader& h : head.headers) res.set(h.name, h.value);
    const bool chunked = q.version >= 11;  // HTTP/1.0 has no chunks: the body ends when the connection closes
    res.keep_alive(q.keep_alive && !server_.closing && chunked);
    if (chunked) res.chunked(true);
    return res;
  }

  // A stream's head or piece written from the handler's own call (HttpExchange::attach), when the writer is idle
  // waiting for pieces: what the socket does not take at once is left in unsent_ for the writer. False: the writer
  // is busy or it is no stream piece (then it is queued as usual).
  bool write_now(HttpExchange::Piece& piece) {
    if (!parked_ || !writing_ || closed_ || finishing_ || peer_gone_ || !unsent_.empty()) return false;
    beast::error_code ec;
    if (piece.kind == HttpExchange::Piece::kHead && !head_written_ && writing_->version >= 11) {
      http::response<http::empty_body> res = stream_head(piece.response, *writing_);
      http::response_serializer<http::empty_body> serializer{res};
      serializer.split(true);
      std::string head;
      while (!ec && !serializer.is_header_done())
        serializer.next(ec, [&](beast::error_code&, const auto& buffers) {
          for (const auto b : beast::buffers_range_ref(buffers)) head.append(static_cast<const char*>(b.data()), b.size());
          serializer.consume(beast::buffer_bytes(buffers));
        });
      if (ec) return false;
      const size_t sent = send_now(asio::buffer(head), ec);
      if (ec) return false;
      head_written_ = chunked_ = true;
      unsent_ = head.substr(sent);
    } else if (piece.kind == HttpExchange::Piece::kData && chunked_) {
      const auto chunk = http::make_chunk(asio::buffer(piece.data));
      const size_t sent = send_now(chunk, ec);
      if (ec) return false;
      beast::buffers_suffix<std::decay_t<decltype(chunk)>> rest(chunk);
      rest.consume(sent);
      unsent_.resize(beast::buffer_bytes(rest));
      asio::buffer_copy(asio::buffer(unsent_), rest);
    } else {
      return false;
    }
    if (!unsent_.empty()) wake();
    return true;
  }

  // Writes what the handler answers until the response is complete. False if the client went away.
  awaitable<bool> write_response(const Queued& q) {
    writing_ = &q;
    head_written_ = chunked_ = false;
    struct Done {  // whatever way this returns
      Connection& c;
      ~Done() { c.writing_ = nullptr; }
    } done{*this};
    bool& chunked = chunked_;
    for (;;) {
      if (!unsent_.empty()) {  // what a piece written at once left over comes before anything queued after it
        beast::error_code ec;
        co_await asio::async_write(socket_, asio::buffer(unsent_), asio::redirect_error(asio::use_awaitable, ec));
        unsent_.clear();
        if (ec || closed_) {
          client_gone();
          co_return false;
        }
      }
      std::vector<HttpExchange::Piece> pieces = current_->take_pieces();
      if (pieces.empty()) {
        if (closed_ || peer_gone_) co_return false;
        parked_ = true;
        co_await wait(wake_timer_);
        parked_ = false;
        continue;
      }
      for (size_t i = 0; i < pieces.size(); ++i) {
        HttpExchange::Piece& piece = pieces[i];
        beast::error_code ec;
        bool complete = false;
        const bool keep_alive = q.keep_alive && !server_.closing;
        if (piece.kind == HttpExchange::Piece::kWhole) {
          http::response<http::string_body> res{static_cast<http::status>(piece.response.status), q.version};
          res.set(http::field::server, "strata");
          res.set(http::field::content_type, piece.response.content_type);
          for (const HttpHeader& h : piece.response.headers) res.set(h.name, h.value);
          res.keep_alive(keep_alive);
          res.body() = std::move(piece.response.body);
          res.prepare_payload();
          co_await http::async_write(socket_, res, asio::redirect_error(asio::use_awaitable, ec));
          complete = true;
        } else if (piece.kind == HttpExchange::Piece::kHead) {
          http::response<http::empty_body> res = stream_head(piece.response, q);
          chunked = q.version >= 11;
          head_written_ = true;
          http::response_serializer<http::empty_body> serializer{res};
          co_await http::async_write_header(socket_, serializer, asio::redirect_error(asio::use_awaitable, ec));
        } else if (piece.kind == HttpExchange::Piece::kData) {
          std::string data = std::move(piece.data);  // coalesce what is queued into one chunk
          while (i + 1 < pieces.size() && pieces[i + 1].kind == HttpExchange::Piece::kData) data += pieces[++i].data;
          if (chunked) {
            const auto chunk = http::make_chunk(asio::buffer(data));
            const size_t sent = send_now(chunk, ec);
            if (!ec && sent < asio::buffer_size(chunk)) {
              beast::buffers_suffix<std::decay_t<decltype(chunk)>> rest(chunk);
              rest.consume(sent);
              co_await asio::async_write(socket_, rest, asio::redirect_error(asio::use_awaitable, ec));
            }
          } else {
            const size_t sent = send_now(asio::buffer(data), ec);
            if (!ec && sent < data.size())
              co_await asio::async_write(socket_, asio::buffer(data) + sent, asio::redirect_error(asio::use_awaitable, ec));
          }
        } else {
          if (chunked)
            co_await asio::async_write(socket_, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
          complete = true;
          if (!chunked) {
            finish();
            co_return true;
          }
        }
        if (ec || closed_) {
          client_gone();
          co_return false;
        }
        if (complete) co_return true;
      }
    }
  }

  // Closes a connection that has been idle too long, and finishes a half-closed one after its grace.
  awaitable<void> watchdog(std::shared_ptr<Connection> self) {
    (void)self;
    while (!closed_) {
      Clock::time_point deadline = Clock::time_point::max();
      if (finishing_) deadline = close_deadline_;
      else if (idle()) deadline = last_activity_ + server_.cfg.idle_timeout;
      if (Clock::now() >= deadline) {
        close();
        break;
      }
      co_await wait(watchdog_timer_, deadline);
    }
  }

  HttpServer::Impl& server_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  asio::steady_timer wake_timer_, resume_timer_, watchdog_timer_;
  std::deque<Queued> queue_;
  std::shared_ptr<HttpExchange> current_;
  bool closed_ = false, finishing_ = false, peer_gone_ = false;
  // The response being written (write_response): its request, whether its stream head is out and chunked, whether
  // the writer is idle waiting for pieces (write_now may then write one itself), and what such a write left over.
  const Queued* writing_ = nullptr;
  bool head_written_ = false, chunked_ = false, parked_ = false;
  std::string unsent_;
  Clock::time_point last_activity_, close_deadline_;
};

}  // namespace

awaitable<void> HttpServer::Impl::accept_loop() {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of file descriptors and the like: pause instead of spinning.
      asio::steady_timer pause(io, std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);  // a streamed token should leave at once
    auto connection = std::make_shared<Connection>(std::move(socket), *this);
    connection->start();
    if (closing) connection->close_when_idle();
  }
}

HttpServer::HttpServer(HttpServerConfig config, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = std::move(config);
  impl_->handler = std::move(handler);
  beast::error_code ec;
  asio::ip::address address = asio::ip::make_address(impl_->cfg.host, ec);
  if (ec) {
    // A host name ("localhost", the machine's name): listen on the first IPv4 address it resolves to (the
    // default, 127.0.0.1, is IPv4 too: clients try it for "localhost"), else its first address.
    asio::io_context lookup;
    tcp::resolver resolver(lookup);
    const tcp::resolver::results_type found = resolver.resolve(impl_->cfg.host, "", ec);
    if (ec || found.empty())
      fail("--host: '", impl_->cfg.host, "' is neither an IP address nor a name that resolves (",
           ec ? ec.message() : "no addresses", ")");
    address = found.begin()->endpoint().address();
    for (const auto& entry : found)
      if (entry.endpoint().address().is_v4()) {
        address = entry.endpoint().address();
        break;
      }
  }
  const tcp::endpoint endpoint(address, impl_->cfg.port);
  tcp::acceptor& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on ", impl_->cfg.host, ":", impl_->cfg.port, " (", ec.message(), ")");
  impl_->port = acceptor.local_endpoint().port();
}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::port() const { return impl_->port; }

asio::io_context& HttpServer::io_context() { return impl_->io; }

bool HttpServer::running() const { return impl_->thread.joinable() && !impl_->stopped; }

void HttpServer::start() {
  if (impl_->thread.joinable() || impl_->stopped) return;
  impl_->work.emplace(impl_->io.get_executor());
  asio::co_spawn(impl_->io, impl_->accept_loop(), report);
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

void HttpServer::post(std::function<void()> fn) {
  if (impl_->stopped) return;
  asio::post(impl_->io, std::move(fn));
}

void HttpServer::post_after(std::chrono::milliseconds delay, std::function<void()> fn) {
  if (impl_->stopped) return;
  asio::post(impl_->io, [this, delay, fn = std::move(fn)]() mutable {
    auto timer = std::make_shared<asio::steady_timer>(impl_->io, delay);
    timer->async_wait([timer, fn = std::move(fn)](const beast::error_code& ec) {
      if (!ec) fn();
    });
  });
}

void HttpServer::stop_accepting() {
  post([this] {
    impl_->closing = true;
    beast::error_code ec;
    impl_->acceptor.close(ec);
    // Copy: closing a connection may destroy it, which edits the set.
    std::vector<std::shared_ptr<Connection>> all;
    for (Connection* c : impl_->connections) all.push_back(c->shared_from_this());
    for (const auto& c : all) c->close_when_idle();
  });
}

void HttpServer::stop() {
  if (impl_->stopped.exchange(true)) return;
  if (impl_->thread.joinable()) {
    asio::post(impl_->io, [this] {
      beast::error_code ec;
      impl_->acceptor.close(ec);
      std::vector<std::shared_ptr<Connection>> all;
      for (Connection* c : impl_->connections) all.push_back(c->shared_from_this());
      for (const auto& c : all) c->close();
      impl_->work.reset();
      // Let the coroutines see their aborted operations and end, then stop whatever timers remain.
      asio::post(impl_->io, [this] { asio::post(impl_->io, [this] { impl_->io.stop(); }); });
    });
    impl_->thread.join();
  }
}

size_t HttpServer::open_connections() const { return impl_->connection_count; }

}  // namespace strata::server
