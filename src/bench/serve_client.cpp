// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include "bench/serve_client.h"

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <random>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using Clock = std::chrono::steady_clock;

namespace {

bool non_empty(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && ((it->is_string() && !it->get_ref<const std::string&>().empty()) ||
                                (it->is_array() && !it->empty()));
}

// A choice that streams output: a finish_reason, or text / content / reasoning_content / tool_calls.
bool carries_output(const nlohmann::json& choice) {
  if (!choice.is_object()) return false;
  if (const auto f = choice.find("finish_reason"); f != choice.end() && !f->is_null()) return true;
  if (non_empty(choice, "text")) return true;
  const auto delta = choice.find("delta");
  return delta != choice.end() && delta->is_object() &&
         (non_empty(*delta, "content") || non_empty(*delta, "reasoning_content") || non_empty(*delta, "tool_calls"));
}

bool document_carries_output(const nlohmann::json& chunk) {
  const auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array()) return false;
  for (const nlohmann::json& c : *choices)
    if (carries_output(c)) return true;
  return false;
}

// What the benchmark needs from one stream chunk, found by nlohmann's SAX parser: the payload is parsed (and
// validated) whole, as a document would be, without building one — a std::map and strings per chunk cost the client
// more than the rest of its work on the chunk. It answers what SseReader::document_event would find: whether the
// payload is an object, whether some choice carries output (carries_output), and whether it has an "error" key or
// a "usage" object, which are rare (one usage chunk per request) and then read from a parsed document.
class ChunkScan {
 public:
  using json = nlohmann::json;
  bool object = false;
  bool output = false;
  bool needs_document = false;

  bool null() { return value(false, false); }
  bool boolean(bool) { return value(true, false); }
  bool number_integer(json::number_integer_t) { return value(true, false); }
  bool number_unsigned(json::number_unsigned_t) { return value(true, false); }
  bool number_float(json::number_float_t, const json::string_t&) { return value(true, false); }
  bool string(json::string_t& s) { return value(true, !s.empty()); }
  bool binary(json::binary_t&) { return value(true, false); }
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    Frame& f = stack_.back();
    f.field = field_of(f.role, k);
    if (f.field == Field::Error) needs_document = true;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  // Where a value sits: the chunk, its choices array, a choice, a choice's delta, or an array whose being
  // non-empty is what counts (text / content / reasoning_content / tool_calls given as arrays).
  enum class Role { Top, Choices, Choice, Delta, NonEmpty, Other };
  enum class Field { Other, Error, Usage, Choices, FinishReason, Text, Delta, DeltaOutput };
  struct Frame {
    Role role;
    bool array;
    Field field = Field::Other;
  };

  static Field field_of(Role role, const std::string& k) {
    if (role == Role::Top)
      return k == "error" ? Field::Error : k == "usage" ? Field::Usage : k == "choices" ? Field::Choices : Field::Other;
    if (role == Role::Choice)
      return k == "finish_reason" ? Field::FinishReason : k == "text" ? Field::Text : k == "delta" ? Field::Delta : Field::Other;
    if (role == Role::Delta && (k == "content" || k == "reasoning_content" || k == "tool_calls")) return Field::DeltaOutput;
    return Field::Other;
  }

  bool value(bool non_null, bool non_empty_string) {
    if (stack_.empty()) return true;  // a bare scalar: not an object
    const Frame& f = stack_.back();
    if (f.array) {
      if (f.role == Role::NonEmpty) output = true;
      return true;
    }
    if (f.role == Role::Choice && ((f.field == Field::FinishReason && non_null) || (f.field == Field::Text && non_empty_string)))
      output = true;
    if (f.role == Role::Delta && f.field == Field::DeltaOutput && non_empty_string) output = true;
    return true;
  }

  bool open(bool array) {
    Role role = Role::Other;
    if (stack_.empty()) {
      object = !array;
      if (object) role = Role::Top;
    } else if (const Frame& f = stack_.back(); f.array) {
      if (f.role == Role::Choices && !array) role = Role::Choice;
      if (f.role == Role::NonEmpty) output = true;
    } else if (f.role == Role::Top) {
      if (f.field == Field::Usage && !array) needs_document = true;
      if (f.field == Field::Choices && array) role = Role::Choices;
    } else if (f.role == Role::Choice) {
      if (f.field == Field::FinishReason) output = true;  // not null
      if (f.field == Field::Text && array) role = Role::NonEmpty;
      if (f.field == Field::Delta && !array) role = Role::Delta;
    } else if (f.role == Role::Delta) {
      if (f.field == Field::DeltaOutput && array) role = Role::NonEmpty;
    }
    stack_.push_back({role, array});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  std::vector<Frame> stack_;
};

// Splits a server-sent-event stream into events and picks out what the benchmark measures.
class SseReader {
 public:
  SseReader(RequestRecord& record, Clock::time_point sent) : record_(record), sent_(sent) {}

  void feed(const char* data, size_t n, Clock::time_point now) {
    pending_.append(data, n);
    size_t at = 0;
    for (;;) {
      const size_t end = pending_.find("\n\n", at);
      if (end == std::string::npos) break;
      event(std::string_view(pending_).substr(at, end - at), now);
      at = end + 2;
    }
    pending_.erase(0, at);
  }
  bool done() const { return done_; }
  const std::string& error() const { return error_; }
  std::optional<int64_t> usage_tokens() const { return usage_tokens_; }

 private:
  void event(std::string_view text, Clock::time_point now) {
    // One or more "data: ..." lines (other fields and comments are skipped); '\r' from CRLF servers dropped.
    std::string payload;
    size_t at = 0;
    while (at <= text.size()) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      std::string_view line = text.substr(at, end - at);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.rfind("data:", 0) == 0) {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        if (!payload.empty()) payload += '\n';
        payload += line;
      }
      at = end + 1;
    }
    if (payload.empty()) return;
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    ChunkScan scan;
    if (nlohmann::json::sax_parse(payload, &scan) && scan.object && !scan.needs_document) {
      if (scan.output) token_chunk(now);
      return;
    }
    document_event(payload, now);
  }

  // The chunk as a parsed document: errors, usage, and anything that is not a JSON object.
  void document_event(const std::string& payload, Clock::time_point now) {
    const nlohmann::json chunk = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (chunk.is_discarded() || !chunk.is_object()) {
      if (error_.empty()) error_ = "a stream event is not JSON: " + payload.substr(0, 200);
      return;
    }
    if (const auto e = chunk.find("error"); e != chunk.end()) {
      if (error_.empty()) error_ = "error event: " + e->dump().substr(0, 300);
      return;
    }
    if (const auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
      record_.prompt_tokens = u->value("prompt_tokens", int64_t{0});
      if (const auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
        record_.cached_tokens = d->value("cached_tokens", int64_t{0});
      usage_tokens_ = u->value("completion_tokens", int64_t{0});
    }
    if (document_carries_output(chunk)) token_chunk(now);
  }

  void token_chunk(Clock::time_point now) {
    if (record_.chunks == 0) record_.ttft_s = std::chrono::duration<double>(now - sent_).count();
    else record_.itl_s.push_back(std::chrono::duration<double>(now - last_).count());
    last_ = now;
    ++record_.chunks;
  }

  RequestRecord& record_;
  Clock::time_point sent_, last_;
  std::string pending_, error_;
  std::optional<int64_t> usage_tokens_;
  bool done_ = false;
};

struct Connection {
  explicit Connection(asio::io_context& io) : socket(io) {}
  tcp::socket socket;
  beast::flat_buffer buffer;
};

std::string describe(const boost::system::error_code& ec) { return ec.message(); }

class LoadRun {
 public:
  LoadRun(const LoadConfig& config, const std::vector<BenchPrompt>& prompts)
      : cfg_(config), url_(parse_server_url(config.url)), slot_free_(io_), result_() {
    if (cfg_.concurrency < 1) fail("concurrency: expected ≥ 1, found ", cfg_.concurrency);
    if (!(cfg_.request_rate > 0)) fail("request-rate: expected > 0 (or inf), found ", cfg_.request_rate);
    if (!(cfg_.timeout_s > 0)) fail("timeout: expected seconds > 0, found ", cfg_.timeout_s);
    target_ = url_.prefix + (cfg_.chat ? "/v1/chat/completions" : "/v1/completions");
    host_header_ = url_.host + ":" + url_.port;
    // Bodies are built before the clock starts, so the client's JSON work is not in the measurement.
    for (const BenchPrompt& p : prompts) {
      nlohmann::json body = nlohmann::json::object();
      if (!cfg_.model.empty()) body["model"] = cfg_.model;
      if (cfg_.chat) {
        body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", p.text}}});
        body["max_completion_tokens"] = p.output_len;
      } else {
        body["prompt"] = p.ids;
        body["max_tokens"] = p.output_len;
      }
      body["temperature"] = cfg_.temperature;
      if (cfg_.ignore_eos) body["ignore_eos"] = true;
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
      bodies_.push_back(body.dump());
    }
    result_.requests.resize(prompts.size());
    std::mt19937_64 rng(cfg_.seed);
    std::exponential_distribution<double> gap(std::isfinite(cfg_.request_rate) ? cfg_.request_rate : 1.0);
    double t = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      release_s_.push_back(std::isfinite(cfg_.request_rate) ? t : 0.0);
      t += gap(rng);
    }
  }

  LoadResult run() {
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    endpoints_ = resolver.resolve(url_.host, url_.port, ec);
    if (ec) fail("url: cannot resolve '", url_.host, "': ", describe(ec));
    start_ = Clock::now();
    last_done_ = start_;
    asio::co_spawn(io_, dispatch(), asio::detached);
    io_.run();
    result_.duration_s = std::chrono::duration<double>(last_done_ - start_).count();
    return std::move(result_);
  }

 private:
  awaitable<void> dispatch() {
    asio::steady_timer arrival(io_);
    for (size_t i = 0; i < bodies_.size(); ++i) {
      const auto release = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(release_s_[i]));
      if (release > Clock::now()) {
        arrival.expires_at(release);
        boost::system::error_code ec;
        co_await arrival.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      while (in_flight_ >= cfg_.concurrency) {
        slot_free_.expires_at(Clock::time_point::max());
        boost::system::error_code ec;
        co_await slot_free_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      ++in_flight_;
      result_.max_in_flight = std::max(result_.max_in_flight, in_flight_);
      asio::co_spawn(io_, send(i), asio::detached);
    }
  }

  // An idle kept-alive connection, or a new (unconnected) one when there is none or `fresh` is asked for.
  std::shared_ptr<Connection> take_connection(bool fresh, bool& reused) {
    reused = !fresh && !idle_.empty();
    if (!reused) {
      ++result_.connections;
      return std::make_shared<Connection>(io_);
    }
    std::shared_ptr<Connection> c = std::move(idle_.back());
    idle_.pop_back();
    return c;
  }

  awaitable<void> send(size_t i) {
    RequestRecord& record = result_.requests[i];
    const Clock::time_point sent = Clock::now();
    record.send_s = std::chrono::duration<double>(sent - start_).count();
    SseReader sse(record, sent);
    // What the deadline's handler may touch: it can run after this coroutine has ended.
    struct Watch {
      std::shared_ptr<Connection> conn;
      bool timed_out = false;
    };
    const auto watch = std::make_shared<Watch>();
    std::shared_ptr<Connection>& conn = watch->conn;
    asio::steady_timer deadline(io_);
    deadline.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.timeout_s)));
    deadline.async_wait([watch](boost::system::error_code wait_ec) {
      if (wait_ec || !watch->conn) return;  // cancelled: the request ended in time
      watch->timed_out = true;
      watch->conn->socket.close();
    });
    bool keep = false;
    boost::system::error_code ec;

    http::request<http::string_body> req{http::verb::post, target_, 11};
    req.set(http::field::host, host_header_);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "text/event-stream");
    if (!cfg_.api_key.empty()) req.set(http::field::authorization, "Bearer " + cfg_.api_key);
    req.keep_alive(true);
    req.body() = bodies_[i];
    req.prepare_payload();

    // A kept-alive connection may have been closed by the server meanwhile: then one retry on a new one.
    for (int attempt = 0; attempt < 2; ++attempt) {
      bool reused = false;
      conn = take_connection(/*fresh=*/attempt > 0, reused);
      ec = {};
      if (!reused) {
        co_await asio::async_connect(conn->socket, endpoints_, asio::redirect_error(asio::use_awaitable, ec));
        if (ec) {
          record.error = "connect: " + describe(ec);
          break;
        }
        conn->socket.set_option(tcp::no_delay(true), ec);
      }
      co_await http::async_write(conn->socket, req, asio::redirect_error(asio::use_awaitable, ec));
      if (ec && reused) continue;
      if (ec) {
        record.error = "send: " + describe(ec);
        break;
      }
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(std::numeric_limits<uint64_t>::max());
      co_await http::async_read_header(conn->socket, conn->buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (ec && reused && !watch->timed_out) continue;
      if (ec) {
        record.error = "reading the response head: " + describe(ec);
        break;
      }
      const unsigned status = parser.get().result_int();
      std::string error_body;
      char buf[16384];
      while (!parser.is_done()) {
        parser.get().body().data = buf;
        parser.get().body().size = sizeof buf;
        co_await http::async_read_some(conn->socket, conn->buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) break;
        const size_t n = sizeof buf - parser.get().body().size;
        if (status != 200) error_body.append(buf, std::min(n, size_t{2000} - std::min(size_t{2000}, error_body.size())));
        else if (n > 0) sse.feed(buf, n, Clock::now());
      }
      const Clock::time_point end = Clock::now();
      if (status != 200) {
        record.error = "HTTP " + std::to_string(status) + ": " + error_body;
      } else if (ec) {
        record.error = "reading the stream: " + describe(ec);
      } else if (!sse.error().empty()) {
        record.error = sse.error();
      } else if (!sse.done()) {
        record.error = "the stream ended without data: [DONE]";
      } else {
        record.ok = true;
        record.e2e_s = std::chrono::duration<double>(end - sent).count();
        record.output_tokens = sse.usage_tokens().value_or(record.chunks);
      }
      keep = !ec && parser.is_done() && parser.keep_alive();
      break;
    }
    deadline.cancel();
    if (watch->timed_out) {
      record.ok = false;
      record.error = "timed out after " + std::to_string(cfg_.timeout_s) + " s";
      keep = false;
    }
    if (conn && keep) idle_.push_back(conn);
    else if (conn) conn->socket.close(ec);
    conn.reset();
    last_done_ = std::max(last_done_, Clock::now());
    --in_flight_;
    slot_free_.cancel();
    if (++finished_ == bodies_.size()) {
      for (auto& c : idle_) c->socket.close(ec);
      idle_.clear();
    }
  }

  LoadConfig cfg_;
  ServerUrl url_;
  asio::io_context io_;
  asio::steady_timer slot_free_;  // cancelled whenever a request ends: the dispatcher waits on it for a slot
  tcp::resolver::results_type endpoints_;
  std::string target_, host_header_;
  std::vector<std::string> bodies_;
  std::vector<double> release_s_;
  std::vector<std::shared_ptr<Connection>> idle_;
  Clock::time_point start_, last_done_;
  int64_t in_flight_ = 0;
  size_t finished_ = 0;
  LoadResult result_;
};

}  // namespace

std::optional<bool> chunk_carries_output(const std::string& payload) {
  ChunkScan scan;
  if (!nlohmann::json::sax_parse(payload, &scan) || !scan.object) return std::nullopt;
  if (!scan.needs_document) return scan.output;
  return document_carries_output(nlohmann::json::parse(payload));
}

LoadResult run_load(const LoadConfig& config, const std::vector<BenchPrompt>& prompts) {
  LoadRun run(config, prompts);
  return run.run();
}

std::string first_served_model(const std::string& url, const std::string& api_key, double timeout_s) {
  const ServerUrl u = parse_server_url(url);
  asio::io_context io;
  tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  boost::system::error_code ec;
  const auto endpoints = resolver.resolve(u.host, u.port, ec);
  if (ec) fail("url: cannot resolve '", u.host, "': ", ec.message());
  stream.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  stream.connect(endpoints, ec);
  if (ec) fail("cannot connect to ", url, ": ", ec.message());
  http::request<http::empty_body> req{http::verb::get, u.prefix + "/v1/models", 11};
  req.set(http::field::host, u.host + ":" + u.port);
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  if (!ec) http::read(stream, buffer, res, ec);
  if (ec) fail("GET ", u.prefix, "/v1/models: ", ec.message());
  if (res.result_int() != 200)
    fail("GET ", u.prefix, "/v1/models: HTTP ", res.result_int(), ": ", res.body().substr(0, 500), " (pass --model NAME)");
  const nlohmann::json j = nlohmann::json::parse(res.body(), nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    fail("GET ", u.prefix, "/v1/models: expected {\"data\": [{\"id\": ...}]}, found ", res.body().substr(0, 300));
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace strata::bench
