#pragma once
// An asynchronous HTTP/1.1 server (Boost.Beast over Boost.Asio, one I/O thread): thousands of idle or slowly
// streaming connections cost a socket, a few buffers and two coroutine frames each, never a thread.
//
// Each connection runs two coroutines on the I/O thread: a reader that parses requests (keep-alive, pipelining,
// a body limit) and keeps reading while a response is in progress, so a client that goes away is noticed at once;
// and a writer that writes what the handler answers — one whole response, or a stream (chunked transfer encoding)
// written piece by piece. A request on an idle connection goes to the handler (as an HttpExchange) from the reader,
// as soon as it is read; a pipelined one from the writer, when the responses before it are complete. The handler may answer from
// any thread, at any later time; the exchange posts to the I/O thread.
//
// Nothing here knows about OpenAI or the engine; Beast and Asio stay inside http_server.cpp (io_context() hands out
// the event loop, forward-declared, to a handler that brings its own Asio code).
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace strata::server {

struct HttpHeader {
  std::string name, value;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::vector<HttpHeader> headers;
  std::string body;
  // When the server had read the whole request: where a handler that measures its own time per request starts.
  std::chrono::steady_clock::time_point received{};
  std::string path() const;                                // target without the query
  const std::string* header(std::string_view name) const;  // case-insensitive; null when absent
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<HttpHeader> headers;
};

// One request and its response. Every method may be called from any thread.
class HttpExchange {
 public:
  explicit HttpExchange(HttpRequest request);
  const HttpRequest& request() const { return request_; }

  // A whole response. Ignored if a response was already begun.
  void respond(HttpResponse response);
  // A streamed response (chunked): the status and headers now, then write() pieces, then end_stream().
  void begin_stream(int status, std::string content_type, std::vector<HttpHeader> headers = {});
  void write(std::string data);
  void end_stream();

  // Called once, on the I/O thread, if the client goes away before the response is complete (at once if it
  // already has). Responses written afterwards are dropped.
  void on_peer_gone(std::function<void()> callback);
  bool peer_gone() const;

  // --- for the connection (http_server.cpp) ---
  struct Piece {
    enum Kind { kWhole, kHead, kData, kEnd } kind;
    HttpResponse response;  // kWhole, kHead (status, content type, headers)
    std::string data;       // kData
  };
  // wake: called when pieces are queued. write_now (optional): the connection's offer to write a piece at once,
  // called on the I/O thread only when no piece is queued before it; false leaves the piece to be queued.
  void attach(std::function<void()> wake, std::function<bool(Piece&)> write_now = {});
  std::vector<Piece> take_pieces();
  void mark_peer_gone();  // runs the callback (I/O thread)

 private:
  void push(Piece piece);

  HttpRequest request_;
  mutable std::mutex mu_;
  std::vector<Piece> pieces_;
  std::function<void()> wake_;
  std::function<bool(Piece&)> write_now_;
  bool begun_ = false, ended_ = false, gone_ = false;
  std::function<void()> on_gone_;
};

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: an ephemeral port (see HttpServer::port)
  size_t max_body_bytes = 8u << 20;
  size_t max_header_bytes = 64u << 10;
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};  // a connection with nothing in progress
  // The body of errors the server answers by itself (413 body too large, 400 malformed HTTP).
  std::function<HttpResponse(int status, const std::string& message)> error_response;
};

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<HttpExchange>)>;  // called on the I/O thread

  // Binds and listens (a strata::Error names the address if that fails); serving starts with start().
  HttpServer(HttpServerConfig config, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  void start();  // starts the I/O thread
  bool running() const;  // started and not stopped

  // The I/O thread's event loop, for a handler that runs its own Asio work beside the connections (the router's
  // upstream connections and health checks: one thread, no hand-over between threads per request). Work on it ends
  // with stop().
  boost::asio::io_context& io_context();

  // Runs `fn` on the I/O thread (now, or after `delay`). Dropped once the server has stopped.
  void post(std::function<void()> fn);
  void post_after(std::chrono::milliseconds delay, std::function<void()> fn);

  // Graceful shutdown, step one (any thread): stop accepting, close idle connections, and close every other
  // connection once its response is complete.
  void stop_accepting();
  // Closes every connection and ends the I/O thread (any thread but the I/O thread; joins it).
  void stop();
  size_t open_connections() const;

  struct Impl;  // http_server.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::server
