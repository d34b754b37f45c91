// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include "router/router.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/token_blocks.h"
#include "router/prefix_index.h"
#include "router/router_metrics.h"
#include "server/http_server.h"
#include "server/load_report.h"
#include "server/openai_protocol.h"
#include "server/request_prompts.h"
#include "server/server_url.h"
#include "server/worker_pool.h"

namespace strata::router {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using Clock = std::chrono::steady_clock;
using server::HttpExchange;
using server::HttpResponse;

const char* role_name(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::Colocated: return "backend";
    case ReplicaRole::Prefill: return "prefill";
    case ReplicaRole::Decode: return "decode";
  }
  return "?";
}

namespace {

constexpr auto kAwait = asio::use_awaitable;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

HttpResponse error_response(int status, const std::string& message, const char* type, const char* code) {
  return HttpResponse{status, "application/json", server::error_body(message, type, "", code), {}};
}

// One kept-alive connection to a replica.
struct Link {
  explicit Link(asio::io_context& io) : stream(io) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  // The response body's pieces pass through here. Kept with the connection: as a local of forward() it would make
  // each request's coroutine frame a 16 KiB allocation (malloc's slow path, with consolidation on free).
  std::array<char, 16384> body;
};

enum class Health {
  Unknown,  // no check has succeeded yet (starting up): takes no requests
  Healthy,
  Ejected,  // failed checks or connections: takes no requests until re-admitted
};

struct Replica {
  ReplicaSpec spec;
  server::ServerUrl url;
  std::string base;  // http://HOST:PORT[PREFIX], as X-Strata-Prefill names it
  tcp::resolver::results_type endpoints;
  Health health = Health::Unknown;
  bool checked = false;  // its first check has finished (either way)
  int failures = 0, successes = 0;  // consecutive
  std::string last_error;
  std::optional<server::LoadReport> report;
  int64_t in_flight = 0;
  std::vector<std::shared_ptr<Link>> idle;
  int64_t requests = 0, failures_total = 0, ejections = 0, readmissions = 0;
  int64_t connects = 0;  // connections opened while a request waited for one
  // Connections opened ahead of need (preconnect()), so a request rarely waits for a connect: in progress, and
  // done in all.
  std::vector<std::shared_ptr<Link>> connecting;
  int64_t preconnects = 0;
};


// prompt_cache_key → the replica its requests went to, the least recently used key forgotten first.
class StickyKeys {
 public:
  explicit StickyKeys(size_t capacity) : capacity_(capacity) {}
  std::optional<size_t> find(const std::string& key) const {
    const auto it = map_.find(key);
    return it == map_.end() ? std::nullopt : std::optional<size_t>(it->second.first);
  }
  void put(const std::string& key, size_t replica) {
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      it->second.first = replica;
      return;
    }
    order_.push_front(key);
    map_.emplace(key, std::make_pair(replica, order_.begin()));
    if (map_.size() > capacity_) {
      map_.erase(order_.back());
      order_.pop_back();
    }
  }

 private:
  size_t capacity_;
  std::list<std::string> order_;
  std::unordered_map<std::string, std::pair<size_t, std::list<std::string>::iterator>> map_;
};

// Bodies of this size or more are parsed and tokenized on the preparer's thread instead of the I/O thread.
constexpr size_t kPrepareInlineBytes = 16 << 10;

}  // namespace

// One client request on the router thread, from its hand-over to its answer.
struct Proxied {
  std::shared_ptr<HttpExchange> exchange;
  http::verb method = http::verb::post;
  std::string target, body, authorization;
  bool completion = false;             // placed by the policy (else /v1/models: any healthy replica)
  bool chat = false;                   // /v1/chat/completions (else /v1/completions)
  std::vector<int32_t> prompt;         // the first prompt's tokens, when tokenized
  bool tokenized = false;
  std::string cache_key;               // prompt_cache_key
  Clock::time_point received;
  bool client_gone = false;
  std::shared_ptr<Link> link;          // the connection now in use (closed to abort it)
  std::optional<size_t> at;            // the replica it is on
  std::string aborted_because;         // set when the router cut it (its replica was ejected)

  // Its attempts (route()).
  std::vector<model::BlockHash> hashes;  // the prompt's block hashes (cache-aware, when hashed)
  bool hashed = false;
  std::vector<bool> tried;             // per replica
  int attempts = 0;
  std::string failures;                // "URL: why; ..." of the replicas tried
  bool only_503 = true, answered = false;
  // The attempt under way: its request as sent (head and body), how much of it is written, and when the last byte
  // was. begin_attempt() writes what the socket takes at once on a kept-alive connection; forward() the rest.
  std::string wire;
  size_t written = 0;
  boost::system::error_code write_error;
  Clock::time_point sent;
};

struct Router::Impl {
  explicit Impl(RouterConfig config);

  // Front (the HTTP server's I/O thread).
  void handle(std::shared_ptr<HttpExchange> exchange);
  // Parses a completion request (and tokenizes it for cache-aware routing): an error answer when it is malformed.
  // Any thread: it reads only the request and the tokenizer.
  std::optional<HttpResponse> prepare(Proxied& p) const;
  void prepared(std::shared_ptr<Proxied> p, std::optional<HttpResponse> error);
  void hand_over(std::shared_ptr<Proxied> p);

  // Router thread.
  std::optional<size_t> next_attempt(Proxied& p);
  void begin_attempt(Proxied& p, size_t r);
  void write_now(Proxied& p);
  awaitable<void> route(std::shared_ptr<Proxied> p, std::optional<size_t> first);
  enum class Outcome { Answered, Retry, Retry503 };
  awaitable<Outcome> forward(Proxied& p, size_t r, std::string& why);
  Decision decide(const Proxied& p, const std::vector<model::BlockHash>& hashes, bool hashed,
                  const std::vector<bool>& tried);
  std::optional<size_t> pick_prefill() const;
  awaitable<void> watch(size_t r);
  // Tops up the replica's idle connections to --spare-connections (healthy replicas only), without waiting.
  void keep_spares(size_t r);
  awaitable<void> preconnect(size_t r);
  awaitable<std::optional<server::LoadReport>> fetch_load(size_t r, std::string& why);
  void on_check(size_t r, std::optional<server::LoadReport> report, const std::string& why);
  void on_transport_failure(size_t r, bool connect, const std::string& why);
  void eject(size_t r, const std::string& why);
  void answer(Proxied& p, HttpResponse response);
  std::vector<ReplicaMetrics> replica_metrics() const;
  int64_t healthy_targets() const;
  void note_if_quiet();
  void log(const std::string& line) const { std::fprintf(stderr, "strata route: %s\n", line.c_str()); }

  RouterConfig cfg_;
  // The front server, whose I/O thread runs everything here. Declared before everything that holds a socket or
  // timer on its event loop, so that loop outlives them.
  std::unique_ptr<server::HttpServer> http_;
  asio::io_context& io_;
  std::vector<Replica> replicas_;
  std::vector<std::unique_ptr<asio::steady_timer>> timers_;     // per replica: the wait between two checks
  std::vector<std::shared_ptr<beast::tcp_stream>> probes_;      // per replica: the check in progress
  PrefixIndex index_;
  StickyKeys keys_;
  RouterMetrics metrics_;
  size_t round_robin_ = 0;
  // The block size and salt the prefix hashes chain from: the first cache-enabled replica's report.
  std::optional<std::pair<int64_t, model::BlockHash>> basis_;
  std::set<std::shared_ptr<Proxied>> active_;
  size_t watching_ = 0;    // health-check loops still running
  bool stopping_ = false;  // the I/O thread's copy of shutting_down_, once everything is being closed

  std::atomic<bool> shutting_down_{false};
  server::WorkerPool preparer_{1};  // one thread: the preparation of large requests

  std::mutex mu_;
  std::condition_variable cv_;
  size_t first_checks_ = 0;  // replicas whose first check has finished
  bool quiet_ = false;       // after stopping: every request and health check has ended
  bool done_ = false, stopped_ = false;
  std::atomic<int64_t> deadline_ns_{0};  // shutdown: when in-flight requests are cut (steady clock)
};

namespace {

server::HttpServerConfig front_config(const RouterConfig& cfg) {
  server::HttpServerConfig http;
  http.host = cfg.host;
  http.port = cfg.port;
  http.max_body_bytes = cfg.max_body_bytes;
  http.idle_timeout = cfg.idle_timeout;
  http.error_response = [](int status, const std::string& message) {
    return error_response(status, message, "invalid_request_error", "");
  };
  return http;
}

}  // namespace

Router::Impl::Impl(RouterConfig config)
    : cfg_(std::move(config)),
      http_(std::make_unique<server::HttpServer>(front_config(cfg_),
                                                 [this](std::shared_ptr<HttpExchange> e) { handle(std::move(e)); })),
      io_(http_->io_context()),
      index_(std::max<size_t>(1, cfg_.index_blocks)),
      keys_(std::max<size_t>(1, cfg_.cache_keys)) {
  if (cfg_.replicas.empty()) fail("route: no replicas (give --backend URL, or --decode URL with --prefill URL)");
  size_t targets = 0;
  bool prefill = false, decode = false;
  for (const ReplicaSpec& spec : cfg_.replicas) {
    Replica r;
    r.spec = spec;
    try {
      r.url = server::parse_server_url(spec.url);
    } catch (const Error& e) {
      fail("--", role_name(spec.role), " ", spec.url, ": ", e.what());
    }
    r.base = "http://" + (r.url.host.find(':') != std::string::npos ? "[" + r.url.host + "]" : r.url.host) + ":" +
             r.url.port + r.url.prefix;
    for (const Replica& other : replicas_)
      if (other.base == r.base) fail("--", role_name(spec.role), " ", spec.url, ": the same replica is given twice");
    tcp::resolver resolver(io_);
    boost::system::error_code ec;
    r.endpoints = resolver.resolve(r.url.host, r.url.port, ec);
    if (ec) fail("--", role_name(spec.role), " ", spec.url, ": cannot resolve '", r.url.host, "': ", ec.message());
    targets += spec.role != ReplicaRole::Prefill;
    prefill = prefill || spec.role == ReplicaRole::Prefill;
    decode = decode || spec.role == ReplicaRole::Decode;
    replicas_.push_back(std::move(r));
    timers_.push_back(std::make_unique<asio::steady_timer>(io_));
    probes_.emplace_back();
  }
  if (prefill && !decode) fail("--prefill needs at least one --decode replica to send requests to");
  if (targets > PrefixIndex::kMaxReplicas)
    fail("route: ", targets, " replicas take requests; at most ", PrefixIndex::kMaxReplicas, " are supported");
  if (cfg_.max_attempts < 1) fail("route: max attempts must be ≥ 1, found ", cfg_.max_attempts);
  if (cfg_.eject_after < 1 || cfg_.readmit_after < 1) fail("route: --eject-after and --readmit-after must be ≥ 1");
}

// ---------------------------------------------------------------------------------------------------------------
// Front: routes, parsing and tokenizing (the front I/O thread)

void Router::Impl::handle(std::shared_ptr<HttpExchange> exchange) {
  const server::HttpRequest& req = exchange->request();
  const std::string path = req.path();
  const auto expect_method = [&](const char* method) {
    if (req.method == method) return true;
    exchange->respond(error_response(405, "method " + req.method + " is not allowed on " + path + " (use " + method + ")",
                                     "invalid_request_error", ""));
    return false;
  };
  if (path == "/health" || path == "/metrics") {
    if (!expect_method("GET")) return;
    if (path == "/metrics")
      return exchange->respond(HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                                            metrics_.render(replica_metrics(), cfg_.policy, index_.size()), {}});
    const int64_t healthy = healthy_targets();
    if (shutting_down_) return exchange->respond(error_response(503, "the router is shutting down", "server_error", ""));
    if (healthy == 0)
      return exchange->respond(error_response(503, "no replica is healthy", "server_error", "no_healthy_replica"));
    return exchange->respond(HttpResponse{200, "application/json",
                                          nlohmann::ordered_json{{"status", "ok"}, {"healthy_replicas", healthy}}.dump(), {}});
  }
  auto p = std::make_shared<Proxied>();
  p->received = req.received == Clock::time_point{} ? Clock::now() : req.received;
  p->exchange = exchange;
  p->target = req.target;
  if (const std::string* auth = req.header("Authorization")) p->authorization = *auth;
  const bool chat = path == "/v1/chat/completions", completions = path == "/v1/completions";
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0) {
    if (!expect_method("GET")) return;
    p->method = http::verb::get;
    return hand_over(std::move(p));
  }
  if (!chat && !completions)
    return exchange->respond(error_response(404, "no route for " + req.method + " " + path, "invalid_request_error", "not_found"));
  if (!expect_method("POST")) return;
  if (shutting_down_) return exchange->respond(error_response(503, "the router is shutting down", "server_error", ""));
  p->completion = true;
  p->body = req.body;
  p->chat = chat;
  // A large body (a long prompt to parse and tokenize) is prepared off the I/O thread, so it never stalls the
  // streams the router is passing through meanwhile.
  if (p->body.size() < kPrepareInlineBytes) {
    std::optional<HttpResponse> error = prepare(*p);
    return prepared(std::move(p), std::move(error));
  }
  preparer_.post([this, p] {
    std::optional<HttpResponse> error = prepare(*p);
    http_->post([this, p, error = std::move(error)]() mutable { prepared(std::move(p), std::move(error)); });
  });
}

std::optional<HttpResponse> Router::Impl::prepare(Proxied& p) const {
  // The replicas' own parser (with their limits left to them): a malformed request is answered here, with the
  // error a replica would give, and never costs a replica a round trip.
  server::ProtocolLimits limits;
  limits.max_n = limits.max_prompts = limits.max_stop_strings = limits.max_stop_bytes = int64_t{1} << 30;
  server::CompletionRequest parsed;
  try {
    parsed = server::parse_completion_request(p.chat ? server::Endpoint::kChatCompletions : server::Endpoint::kCompletions,
                                              p.body, limits);
  } catch (const server::RequestError& e) {
    return HttpResponse{e.status(), "application/json", server::error_body(e), {}};
  }
  p.cache_key = parsed.prompt_cache_key;
  if (cfg_.tokenizer && cfg_.policy == Policy::CacheAware) {
    // As a replica tokenizes it; what a replica would refuse (or a grammar, which would need compiling here) is
    // routed by load and refused there.
    server::PromptRules rules;
    rules.max_model_len = int64_t{1} << 40;
    rules.vocab_size = int64_t{1} << 30;
    rules.served_model_name = parsed.model;
    try {
      server::TokenizedPrompts t = server::tokenize_prompts(parsed, *cfg_.tokenizer, rules);
      p.prompt = std::move(t.prompts.front());
      p.tokenized = true;
    } catch (const Error&) {
    }
  }
  return std::nullopt;
}

void Router::Impl::prepared(std::shared_ptr<Proxied> p, std::optional<HttpResponse> error) {
  if (error) return answer(*p, std::move(*error));
  hand_over(std::move(p));
}

void Router::Impl::hand_over(std::shared_ptr<Proxied> p) {
  std::weak_ptr<Proxied> weak = p;
  p->exchange->on_peer_gone([weak] {  // on the I/O thread
    const auto q = weak.lock();
    if (!q) return;
    q->client_gone = true;
    if (q->link) q->link->stream.close();
  });
  active_.insert(p);
  p->hashed = p->completion && p->tokenized && basis_;
  if (p->hashed) p->hashes = model::block_hashes(basis_->second, p->prompt, basis_->first);
  p->tried.assign(replicas_.size(), false);
  // The first attempt is decided and, on a kept-alive connection, written here and now: a coroutine's first step
  // runs only on a later turn of the event loop, behind everything queued meanwhile (a burst of streamed events
  // when a replica finishes a step for hundreds of requests at once), and the request would wait there.
  std::optional<size_t> first = next_attempt(*p);
  asio::co_spawn(io_, route(std::move(p), first), asio::detached);
}

// ---------------------------------------------------------------------------------------------------------------
// Routing and forwarding (the router thread)

int64_t Router::Impl::healthy_targets() const {
  int64_t n = 0;
  for (const Replica& r : replicas_) n += r.health == Health::Healthy && r.spec.role != ReplicaRole::Prefill;
  return n;
}

Decision Router::Impl::decide(const Proxied& p, const std::vector<model::BlockHash>& hashes, bool hashed,
                              const std::vector<bool>& tried) {
  PolicyInput in;
  in.policy = p.completion ? cfg_.policy : Policy::LeastLoad;
  in.cache_threshold = cfg_.cache_threshold;
  in.hashed = hashed;
  in.round_robin_next = round_robin_;
  const std::vector<int64_t> matched = hashed ? index_.matched_blocks(hashes, replicas_.size()) : std::vector<int64_t>();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica& r = replicas_[i];
    ReplicaLoad l;
    l.eligible = r.health == Health::Healthy && r.spec.role != ReplicaRole::Prefill && !tried[i];
    l.in_flight = r.in_flight;
    if (r.report) {
      l.waiting = r.report->waiting;
      l.queued_prefill_tokens = r.report->queued_prefill_tokens;
      l.free_blocks = r.report->free_blocks;
    }
    l.saturated = r.in_flight >= cfg_.max_in_flight || (cfg_.max_waiting > 0 && l.waiting >= cfg_.max_waiting);
    if (hashed) l.matched_blocks = matched[i];
    in.replicas.push_back(l);
  }
  if (p.completion && cfg_.policy != Policy::RoundRobin && !p.cache_key.empty()) in.sticky = keys_.find(p.cache_key);
  const Decision d = choose_replica(in);
  if (d.replica && in.policy == Policy::RoundRobin) round_robin_ = *d.replica + 1;
  return d;
}

std::optional<size_t> Router::Impl::pick_prefill() const {
  std::optional<size_t> best;
  double best_load = 0;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica& r = replicas_[i];
    if (r.spec.role != ReplicaRole::Prefill || r.health != Health::Healthy) continue;
    // The router sends prefill replicas nothing itself: their load is what they report.
    const double load = r.report ? static_cast<double>(r.report->requests_in_flight + r.report->waiting) +
                                       static_cast<double>(r.report->queued_prefill_tokens) / kPrefillTokensPerRequest
                                 : 0;
    if (!best || load < best_load) best = i, best_load = load;
  }
  return best;
}

void Router::Impl::answer(Proxied& p, HttpResponse response) {
  metrics_.answered(response.status);
  p.exchange->respond(std::move(response));
}

std::optional<size_t> Router::Impl::next_attempt(Proxied& p) {
  if (p.attempts >= cfg_.max_attempts || p.client_gone || p.answered || stopping_) return std::nullopt;
  const Decision d = decide(p, p.hashes, p.hashed, p.tried);
  if (p.completion) metrics_.decision(d.reason);
  if (!d.replica) {
    if (d.reason == Reason::Saturated) {
      HttpResponse r = error_response(429, "every replica is saturated; retry later" +
                                               (p.failures.empty() ? "" : " (failed meanwhile: " + p.failures + ")"),
                                      "rate_limit_error", "replicas_saturated");
      r.headers.push_back({"Retry-After", std::to_string(cfg_.retry_after.count())});
      answer(p, std::move(r));
      p.answered = true;
    }
    return std::nullopt;
  }
  const size_t r = *d.replica;
  p.tried[r] = true;
  if (p.attempts++ > 0) metrics_.retry();
  if (p.completion) {
    if (p.hashed) index_.insert(p.hashes, r);
    if (!p.cache_key.empty() && cfg_.policy != Policy::RoundRobin) keys_.put(p.cache_key, r);
  }
  begin_attempt(p, r);
  return r;
}

void Router::Impl::begin_attempt(Proxied& p, size_t r) {
  Replica& rep = replicas_[r];
  ++rep.in_flight;  // at once, so that the next request's decision sees it
  ++rep.requests;
  p.at = r;
  p.aborted_because.clear();
  p.link.reset();
  p.written = 0;
  p.write_error = {};
  // The request as one string: one send() for head and body, where Beast's serializer would write through a
  // composed operation whose completion costs a turn of the event loop.
  std::string& w = p.wire;
  w.clear();
  w.append(p.method == http::verb::get ? "GET " : "POST ").append(rep.url.prefix).append(p.target);
  w.append(" HTTP/1.1\r\nHost: ").append(rep.url.host).append(":").append(rep.url.port).append("\r\n");
  if (!p.authorization.empty()) w.append("Authorization: ").append(p.authorization).append("\r\n");
  if (p.completion && rep.spec.role == ReplicaRole::Decode)
    if (const std::optional<size_t> pre = pick_prefill())
      w.append("X-Strata-Prefill: ").append(replicas_[*pre].base).append("\r\n");
  if (p.method == http::verb::post)
    w.append("Content-Type: application/json\r\nContent-Length: ").append(std::to_string(p.body.size())).append("\r\n");
  w.append("\r\n").append(p.body);
  if (rep.idle.empty()) {  // forward() connects first
    keep_spares(r);
    return;
  }
  p.link = std::move(rep.idle.back());
  rep.idle.pop_back();
  write_now(p);
  keep_spares(r);
}

// Writes what the link's socket takes without waiting (nearly always all of it: a request is far smaller than the
// socket's send buffer). Would-block is no error; forward() writes any rest.
void Router::Impl::write_now(Proxied& p) {
  tcp::socket& socket = p.link->stream.socket();
  boost::system::error_code ec;
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  if (!ec) p.written += socket.write_some(asio::buffer(p.wire) + p.written, ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  p.write_error = ec;
  if (!ec && p.written == p.wire.size()) p.sent = Clock::now();
}

awaitable<void> Router::Impl::route(std::shared_ptr<Proxied> p, std::optional<size_t> next) {
  while (next) {
    const size_t r = *next;
    std::string why;
    const Outcome o = co_await forward(*p, r, why);
    if (o == Outcome::Answered) {
      p->answered = true;
      break;
    }
    p->only_503 = p->only_503 && o == Outcome::Retry503;
    p->failures += (p->failures.empty() ? "" : "; ") + replicas_[r].base + ": " + why;
    next = next_attempt(*p);
  }
  if (!p->answered && !p->client_gone) {
    if (stopping_)
      answer(*p, error_response(503, "the router is shutting down", "server_error", ""));
    else if (p->failures.empty())
      answer(*p, error_response(503, "no replica is healthy (" + std::to_string(replicas_.size()) +
                                         " configured; see the router's /metrics)",
                                "server_error", "no_healthy_replica"));
    else
      answer(*p, error_response(p->only_503 ? 503 : 502, "no replica could answer: " + p->failures, "server_error",
                                p->only_503 ? "replicas_unavailable" : "replica_failed"));
  }
  active_.erase(p);
  if (stopping_) note_if_quiet();
}

// GCC 12 with -fsanitize=address and -O2 takes this coroutine's frame, which Asio allocates and frees with its own
// operator new and delete (awaitable_frame_base), for a mismatched pair; the pair is Asio's and matches.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
awaitable<Router::Impl::Outcome> Router::Impl::forward(Proxied& p, size_t r, std::string& why) {
  // begin_attempt() has counted the request on the replica and written what it could on a kept-alive connection.
  Replica& rep = replicas_[r];
  struct Leave {  // whatever way this returns, the request is no longer open on the replica
    Replica& rep;
    Proxied& p;
    ~Leave() {
      --rep.in_flight;
      p.at.reset();
      p.link.reset();
    }
  } leave{rep, p};

  boost::system::error_code ec;
  std::optional<http::response_parser<http::buffer_body>> head;
  // A kept-alive connection the replica has closed meanwhile fails at once: then once more on a new one.
  for (int fresh = 0; fresh < 2; ++fresh) {
    const bool reused = fresh == 0 && p.link;
    if (!reused) {
      ++rep.connects;
      p.link = std::make_shared<Link>(io_);
      p.written = 0;
      p.write_error = {};
    }
    const std::shared_ptr<Link> link = p.link;
    ec = {};
    if (!reused) {
      link->stream.expires_after(cfg_.connect_timeout);
      co_await link->stream.async_connect(rep.endpoints, asio::redirect_error(kAwait, ec));
      if (p.client_gone) co_return Outcome::Answered;
      if (ec) {
        why = p.aborted_because.empty() ? "connect: " + ec.message() : p.aborted_because;
        on_transport_failure(r, true, why);
        co_return Outcome::Retry;
      }
      link->stream.socket().set_option(tcp::no_delay(true), ec);
      ec = {};
      write_now(p);
    }
    link->stream.expires_after(cfg_.request_timeout);
    ec = p.write_error;
    if (!ec && p.written < p.wire.size()) {
      co_await asio::async_write(link->stream, asio::buffer(p.wire) + p.written, asio::redirect_error(kAwait, ec));
      p.sent = Clock::now();
    }
    if (p.client_gone) co_return Outcome::Answered;
    if (ec && reused && p.aborted_because.empty()) continue;
    if (ec) {
      why = p.aborted_because.empty() ? "send: " + ec.message() : p.aborted_because;
      on_transport_failure(r, false, why);
      co_return Outcome::Retry;
    }
    head.emplace();
    head->body_limit(std::numeric_limits<uint64_t>::max());
    co_await http::async_read_header(link->stream, link->buffer, *head, asio::redirect_error(kAwait, ec));
    if (p.client_gone) co_return Outcome::Answered;
    if (ec && reused && p.aborted_because.empty() && ec != beast::error::timeout) continue;
    if (ec) {
      why = !p.aborted_because.empty() ? p.aborted_because
            : ec == beast::error::timeout ? "no response within the request timeout"
                                          : "no response: " + ec.message();
      on_transport_failure(r, false, why);
      co_return Outcome::Retry;
    }
    break;
  }
  const Clock::time_point sent = p.sent;
  Link& link = *p.link;
  http::response_parser<http::buffer_body>& parser = *head;
  const unsigned status = parser.get().result_int();
  const std::string content_type(parser.get()[http::field::content_type]);
  if (status == 503 && !parser.chunked()) {
    // Shutting down or overloaded: nothing was generated, so another replica may take it.
    std::string body;
    while (!parser.is_done() && !ec) {
      parser.get().body().data = link.body.data();
      parser.get().body().size = link.body.size();
      co_await http::async_read_some(link.stream, link.buffer, parser, asio::redirect_error(kAwait, ec));
      if (ec == http::error::need_buffer) ec = {};
      body.append(link.body.data(), link.body.size() - parser.get().body().size);
    }
    why = "HTTP 503: " + body.substr(0, 300);
    if (!ec && parser.keep_alive()) rep.idle.push_back(p.link);
    co_return Outcome::Retry503;
  }
  std::vector<server::HttpHeader> headers = {{"X-Strata-Replica", rep.base}};
  for (const http::field f : {http::field::cache_control, http::field::retry_after, http::field::www_authenticate})
    if (const auto it = parser.get().find(f); it != parser.get().end())
      headers.push_back({std::string(it->name_string()), std::string(it->value())});
  const bool streaming = parser.chunked();
  if (streaming) p.exchange->begin_stream(static_cast<int>(status), content_type, headers);
  std::string body;
  bool first = true;
  char* const buf = link.body.data();
  const size_t capacity = link.body.size();
  while (!parser.is_done()) {
    parser.get().body().data = buf;
    parser.get().body().size = capacity;
    // Bytes already buffered (the head's read often brings the first events along) are parsed at once, without
    // the turn of the event loop an awaited read costs; only what must come from the socket is awaited.
    bool await_more = link.buffer.size() == 0;
    if (!await_more) {
      http::read_some(link.stream.socket(), link.buffer, parser, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        ec = {};
        await_more = parser.get().body().size == capacity;
      }
    }
    if (await_more)
      co_await http::async_read_some(link.stream, link.buffer, parser, asio::redirect_error(kAwait, ec));
    if (ec == http::error::need_buffer) ec = {};
    const size_t n = capacity - parser.get().body().size;
    if (n > 0) {
      const Clock::time_point got = Clock::now();
      if (streaming) p.exchange->write(std::string(buf, n));
      else body.append(buf, n);
      if (first) {
        // The request read → its last byte to the kernel, plus this first byte read → to the kernel on the client's
        // connection (written from this call when the connection's writer is idle; a non-streamed answer is sent
        // whole at its end, so its part ends at the buffering). docs/router.md "Router overhead".
        first = false;
        metrics_.overhead(seconds_between(p.received, sent) + seconds_between(got, Clock::now()));
      }
    }
    if (ec || p.client_gone) break;
  }
  if (p.client_gone) co_return Outcome::Answered;
  if (ec) {
    // The replica failed after its first byte: the client learns it clearly, and no request is sent twice.
    const std::string message = "the replica " + rep.base + " failed mid-response: " +
                                (!p.aborted_because.empty() ? p.aborted_because
                                 : ec == beast::error::timeout ? std::string("the request timeout passed")
                                                               : ec.message());
    metrics_.broken_stream();
    if (p.aborted_because.empty()) on_transport_failure(r, false, message);
    if (streaming) {
      if (content_type.rfind("text/event-stream", 0) == 0)
        p.exchange->write("data: " + server::error_body(message, "server_error", "", "replica_failed") + "\n\n");
      p.exchange->end_stream();
      metrics_.answered(502);
    } else {
      answer(p, error_response(502, message, "server_error", "replica_failed"));
    }
    co_return Outcome::Answered;
  }
  if (streaming) {
    p.exchange->end_stream();
    metrics_.answered(static_cast<int>(status));
  } else {
    answer(p, HttpResponse{static_cast<int>(status), content_type, std::move(body), std::move(headers)});
  }
  if (parser.keep_alive() && rep.health != Health::Ejected) rep.idle.push_back(p.link);
  co_return Outcome::Answered;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// ---------------------------------------------------------------------------------------------------------------
// Health: load reports, ejection, re-admission (the router thread)

awaitable<std::optional<server::LoadReport>> Router::Impl::fetch_load(size_t r, std::string& why) {
  Replica& rep = replicas_[r];
  probes_[r] = std::make_shared<beast::tcp_stream>(io_);
  const std::shared_ptr<beast::tcp_stream> probe = probes_[r];
  beast::tcp_stream& stream = *probe;
  stream.expires_after(cfg_.health_timeout);
  boost::system::error_code ec;
  co_await stream.async_connect(rep.endpoints, asio::redirect_error(kAwait, ec));
  if (ec) {
    why = ec == beast::error::timeout ? "connect timed out" : "connect: " + ec.message();
    co_return std::nullopt;
  }
  http::request<http::empty_body> req{http::verb::get, rep.url.prefix + "/strata/v1/load", 11};
  req.set(http::field::host, rep.url.host + ":" + rep.url.port);
  co_await http::async_write(stream, req, asio::redirect_error(kAwait, ec));
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 16);
  if (!ec) co_await http::async_read(stream, buffer, parser, asio::redirect_error(kAwait, ec));
  stream.close();
  if (ec) {
    why = ec == beast::error::timeout ? "no load report within the health timeout" : "load report: " + ec.message();
    co_return std::nullopt;
  }
  if (parser.get().result_int() != 200) {
    why = "GET /strata/v1/load answered HTTP " + std::to_string(parser.get().result_int());
    co_return std::nullopt;
  }
  try {
    co_return server::parse_load_report(parser.get().body());
  } catch (const Error& e) {
    why = e.what();
  }
  co_return std::nullopt;
}

awaitable<void> Router::Impl::watch(size_t r) {
  ++watching_;
  asio::steady_timer& timer = *timers_[r];
  while (!stopping_) {
    std::string why;
    const Clock::time_point began = Clock::now();
    std::optional<server::LoadReport> report = co_await fetch_load(r, why);
    if (stopping_) break;
    on_check(r, std::move(report), why);
    timer.expires_at(began + cfg_.health_interval);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(kAwait, ec));
  }
  --watching_;
  if (stopping_) note_if_quiet();
}

void Router::Impl::keep_spares(size_t r) {
  Replica& rep = replicas_[r];
  if (stopping_ || rep.health != Health::Healthy) return;
  for (auto n = static_cast<int64_t>(rep.idle.size() + rep.connecting.size()); n < cfg_.spare_connections; ++n)
    asio::co_spawn(io_, preconnect(r), asio::detached);
}

awaitable<void> Router::Impl::preconnect(size_t r) {
  Replica& rep = replicas_[r];
  auto link = std::make_shared<Link>(io_);
  rep.connecting.push_back(link);
  link->stream.expires_after(cfg_.connect_timeout);
  boost::system::error_code ec;
  co_await link->stream.async_connect(rep.endpoints, asio::redirect_error(kAwait, ec));
  std::erase(rep.connecting, link);
  // A spare that cannot connect is no request's failure: the health checks and the requests' own connects judge
  // the replica.
  if (!ec && !stopping_ && rep.health == Health::Healthy) {
    link->stream.socket().set_option(tcp::no_delay(true), ec);
    link->stream.expires_never();
    ++rep.preconnects;
    rep.idle.push_back(std::move(link));
  }
  if (stopping_) note_if_quiet();
}

void Router::Impl::note_if_quiet() {
  if (!active_.empty() || watching_ > 0) return;
  for (const Replica& r : replicas_)
    if (!r.connecting.empty()) return;
  std::lock_guard lock(mu_);
  quiet_ = true;
  cv_.notify_all();
}

void Router::Impl::on_check(size_t r, std::optional<server::LoadReport> report, const std::string& why) {
  Replica& rep = replicas_[r];
  if (report) {
    rep.report = std::move(report);
    rep.failures = 0;
    ++rep.successes;
    if (rep.health == Health::Unknown) {
      rep.health = Health::Healthy;
      log(rep.base + " (" + role_name(rep.spec.role) + ") is up");
      if (rep.spec.role != ReplicaRole::Prefill) keep_spares(r);
    } else if (rep.health == Health::Ejected && rep.successes >= cfg_.readmit_after) {
      rep.health = Health::Healthy;
      ++rep.readmissions;
      log(rep.base + " is re-admitted after " + std::to_string(rep.successes) + " good checks");
      if (rep.spec.role != ReplicaRole::Prefill) keep_spares(r);
    }
    if (!basis_ && rep.report->cache_enabled) basis_ = {rep.report->block_tokens, rep.report->cache_salt};
    else if (basis_ && rep.report->cache_enabled &&
             (basis_->first != rep.report->block_tokens || !(basis_->second == rep.report->cache_salt)) && rep.successes == 1)
      log("warning: " + rep.base + " hashes prefixes differently from the first replica (another model or cache "
          "mode?); cache-aware routing uses the first one's hashes");
  } else {
    rep.successes = 0;
    ++rep.failures;
    rep.last_error = why;
    if (rep.health == Health::Healthy && rep.failures >= cfg_.eject_after)
      eject(r, std::to_string(rep.failures) + " failed health checks (" + why + ")");
  }
  if (!rep.checked) {
    rep.checked = true;
    if (!report) log(rep.base + " is not up yet: " + why);
    std::lock_guard lock(mu_);
    ++first_checks_;
    cv_.notify_all();
  }
}

void Router::Impl::on_transport_failure(size_t r, bool connect, const std::string& why) {
  Replica& rep = replicas_[r];
  ++rep.failures_total;
  rep.last_error = why;
  if (rep.health != Health::Healthy) return;
  // Nobody listening is certain at once; a broken connection counts as a failed check.
  if (connect) return eject(r, why);
  rep.successes = 0;
  if (++rep.failures >= cfg_.eject_after) eject(r, std::to_string(rep.failures) + " failures (" + why + ")");
}

void Router::Impl::eject(size_t r, const std::string& why) {
  Replica& rep = replicas_[r];
  rep.health = Health::Ejected;
  rep.successes = 0;
  ++rep.ejections;
  log(rep.base + " is ejected: " + why);
  for (const auto& link : rep.idle) link->stream.close();
  rep.idle.clear();
  for (const auto& link : rep.connecting) link->stream.close();
  // A replica that comes back has lost its memory-resident cache; what the index says of it is stale.
  if (rep.spec.role != ReplicaRole::Prefill) index_.forget_replica(r);
  // Requests open there are cut now (retried elsewhere when nothing came back yet), rather than left to hang on a
  // replica that may never answer.
  for (const auto& p : active_)
    if (p->at == r && p->link) {
      p->aborted_because = "the replica was ejected: " + why;
      p->link->stream.close();
    }
}

std::vector<ReplicaMetrics> Router::Impl::replica_metrics() const {
  std::vector<ReplicaMetrics> out;
  for (const Replica& r : replicas_) {
    ReplicaMetrics m;
    m.url = r.base;
    m.role = role_name(r.spec.role);
    m.healthy = r.health == Health::Healthy;
    m.reported = r.report.has_value();
    if (r.report) m.report = *r.report;
    m.in_flight = r.in_flight;
    m.requests = r.requests;
    m.failures = r.failures_total;
    m.ejections = r.ejections;
    m.readmissions = r.readmissions;
    m.connects = r.connects;
    m.preconnects = r.preconnects;
    out.push_back(std::move(m));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------

Router::Router(RouterConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Router::~Router() {
  shutdown(std::chrono::milliseconds(0));
  wait();
}

uint16_t Router::port() const { return impl_->http_->port(); }

void Router::start() {
  Impl& m = *impl_;
  // The first checks run as soon as the I/O thread does; "listening" is only said once each has an answer.
  for (size_t r = 0; r < m.replicas_.size(); ++r) asio::co_spawn(m.io_, m.watch(r), asio::detached);
  m.http_->start();
  std::unique_lock lock(m.mu_);
  m.cv_.wait_for(lock, m.cfg_.health_timeout + m.cfg_.connect_timeout + std::chrono::seconds(1),
                 [&] { return m.first_checks_ == m.replicas_.size(); });
}

void Router::shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  const int64_t until = (Clock::now() + grace).time_since_epoch().count();
  int64_t was = m.deadline_ns_.load();
  while ((was == 0 || until < was) && !m.deadline_ns_.compare_exchange_weak(was, until)) {
  }
  if (m.shutting_down_.exchange(true)) return;  // a second call only brings the deadline forward
  if (m.http_->running()) m.http_->stop_accepting();
  std::thread([&m] {
    // In-flight requests finish (their connections close once answered), up to the deadline.
    while (m.http_->open_connections() > 0 && Clock::now().time_since_epoch().count() < m.deadline_ns_.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard lock(m.mu_);
    m.done_ = true;
    m.cv_.notify_all();
  }).detach();
}

void Router::wait() {
  Impl& m = *impl_;
  {
    std::unique_lock lock(m.mu_);
    if (m.stopped_) return;
    m.cv_.wait(lock, [&] { return m.done_; });
  }
  if (m.http_->running()) {
    // Every request and health check ends by itself once its sockets and timers are closed; the event loop is
    // stopped only then, so no coroutine is left suspended on it.
    m.http_->post([&m] {
      m.stopping_ = true;
      for (const auto& p : m.active_)
        if (p->link) p->link->stream.close();
      for (Replica& r : m.replicas_) {
        for (const auto& link : r.idle) link->stream.close();
        r.idle.clear();
        for (const auto& link : r.connecting) link->stream.close();
      }
      for (const auto& t : m.timers_) t->cancel();
      for (const auto& probe : m.probes_)
        if (probe) probe->close();
      m.note_if_quiet();
    });
    std::unique_lock lock(m.mu_);
    if (!m.cv_.wait_for(lock, std::chrono::seconds(10), [&] { return m.quiet_; }))
      m.log("warning: requests or checks still running at shutdown");
  }
  m.preparer_.stop(/*finish_queued=*/false);
  m.http_->stop();
  std::lock_guard lock(m.mu_);
  m.stopped_ = true;
}

bool Router::stopped() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->stopped_;
}

}  // namespace strata::router
