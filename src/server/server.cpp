#include "server/server.h"

#include <cctype>
#include <cstdio>
#include <deque>
#include <functional>
#include <thread>
#include <variant>

#include "disagg/prefill_order.h"
#include "disagg/tcp_state_transport.h"
#include "server/completion_stream.h"
#include "server/load_report.h"
#include "server/request_cache.h"
#include "server/request_constraint.h"
#include "server/request_prompts.h"
#include "server/worker_pool.h"
#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace strata::server {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

HttpResponse json_response(int status, std::string body) { return HttpResponse{status, "application/json", std::move(body), {}}; }

// Compares without an early exit, so the time taken does not reveal how much of a guessed key was right.
bool same_secret(std::string_view given, std::string_view key) {
  unsigned diff = given.size() != key.size() ? 1u : 0u;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned>(static_cast<unsigned char>(given[i]) ^
                                  static_cast<unsigned char>(key.empty() ? 0 : key[i % key.size()]));
  return diff == 0;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// A request parsed and tokenized by a worker, waiting to be admitted on the I/O thread.
struct Server::Prepared {
  std::shared_ptr<HttpExchange> exchange;
  Clock::time_point arrival;
  CompletionRequest request;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> max_tokens;  // per prompt
  std::vector<std::string> echo;
  std::shared_ptr<const engine::OutputConstraint> constraint;  // structured outputs / tool_choice (null: none)
  size_t key = 0;  // which API key it came with
  // Per prompt: its state arriving from a prefill replica (null: none, computed here).
  std::vector<std::shared_ptr<engine::StateStream>> incoming;
};

// A request in the engine. Lives on the I/O thread until every engine sequence of it has finished.
struct Server::ActiveRequest {
  std::string id;
  std::shared_ptr<HttpExchange> exchange;
  std::unique_ptr<CompletionStream> stream;
  bool streaming = false;
  std::vector<std::string> sequence_ids;  // per choice
  std::vector<bool> sequence_done;        // the engine's finished event has come (or it was never submitted)
  std::vector<Clock::time_point> first_token, last_token;
  Clock::time_point arrival;
  bool any_token = false;
  bool answered = false;        // the response (or its last frame) has been handed to the exchange
  bool failed = false;          // admission failed part-way; an error was sent
  bool shutdown_abort = false;  // aborted because the server is shutting down

  bool all_sequences_done() const {
    for (bool d : sequence_done)
      if (!d) return false;
    return true;
  }
};

Server::Server(const model::Model& model, const text::Tokenizer& tokenizer, engine::EngineConfig engine_config,
               ServerConfig config)
    : model_(model),
      tokenizer_(tokenizer),
      engine_config_(engine_config),
      cfg_(std::move(config)),
      created_(unix_now()),
      metrics_(cfg_.served_model_name) {
  cfg_.limits.vocab_size = model_.config().vocab_size;
  HttpServerConfig http;
  http.host = cfg_.host;
  http.port = cfg_.port;
  http.max_body_bytes = cfg_.max_body_bytes;
  http.idle_timeout = cfg_.idle_timeout;
  http.error_response = [this](int status, const std::string& message) {
    metrics_.request_failed(status);
    return json_response(status, error_body(message, "invalid_request_error", "", ""));
  };
  http_ = std::make_unique<HttpServer>(http, [this](std::shared_ptr<HttpExchange> exchange) { handle(std::move(exchange)); });
  engine_ = std::make_unique<engine::AsyncEngine>(model_, engine_config_, [this] { hand_off_step_events(); });
  workers_ = std::make_unique<WorkerPool>(cfg_.prepare_threads);
  if (cfg_.role != disagg::Role::Prefill) {
    transport_ = cfg_.transport ? cfg_.transport : std::make_shared<disagg::TcpStateTransport>();
    transfers_ = std::make_unique<WorkerPool>(cfg_.transfer_threads);
  }
}

Server::~Server() {
  shutdown(std::chrono::milliseconds(0));
  wait();
}

void Server::start() { http_->start(); }

bool Server::stopped() const {
  std::lock_guard lock(done_mu_);
  return stopped_;
}

// ---------------------------------------------------------------------------------------------------------------
// Routing

void Server::send_error(HttpExchange& exchange, const RequestError& error) {
  metrics_.request_failed(error.status());
  HttpResponse response = json_response(error.status(), error_body(error));
  if (error.status() == 401) response.headers.push_back({"WWW-Authenticate", "Bearer"});
  exchange.respond(std::move(response));
}

std::optional<size_t> Server::authorized(const HttpRequest& request) const {
  if (cfg_.api_keys.empty()) return 0;
  const std::string* header = request.header("Authorization");
  if (!header) return std::nullopt;
  // RFC 9110: the scheme's name is case-insensitive ("bearer KEY" is as good as "Bearer KEY"), and one or more
  // spaces separate it from the key.
  static constexpr std::string_view kBearer = "bearer";
  const std::string_view value(*header);
  if (value.size() <= kBearer.size() || value[kBearer.size()] != ' ') return std::nullopt;
  for (size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(value[i])) != kBearer[i]) return std::nullopt;
  const size_t key = value.find_first_not_of(' ', kBearer.size());
  if (key == std::string_view::npos) return std::nullopt;
  std::optional<size_t> match;
  for (size_t i = 0; i < cfg_.api_keys.size(); ++i)  // every key is compared, so the time says nothing of which
    if (same_secret(value.substr(key), cfg_.api_keys[i]) && !match) match = i;
  return match;
}

engine::CacheOptions Server::cache_options(const Prepared& prepared) const {
  const bool per_key = !cfg_.api_keys.empty() && cfg_.cache_scope_per_key;
  return request_cache_options(prepared.request, engine_config_.cache.get(),
                               per_key ? api_key_scope(cfg_.api_keys[prepared.key]) : std::string());
}

std::string Server::models_body(const std::string* only) const {
  nlohmann::ordered_json model = {{"id", cfg_.served_model_name},
                                  {"object", "model"},
                                  {"created", created_},
                                  {"owned_by", "strata"},
                                  {"root", cfg_.served_model_name},
                                  {"max_model_len", engine_config_.max_model_len}};
  if (only) return model.dump();
  return nlohmann::ordered_json{{"object", "list"}, {"data", nlohmann::ordered_json::array({model})}}.dump();
}

void Server::handle(std::shared_ptr<HttpExchange> exchange) {
  const HttpRequest& req = exchange->request();
  const std::string path = req.path();
  const auto expect_method = [&](const char* method) {
    if (req.method == method) return true;
    send_error(*exchange, RequestError(405, "", cat("method ", req.method, " is not allowed on ", path, " (use ", method, ")")));
    return false;
  };
  if (path == "/health") {
    if (!expect_method("GET")) return;
    if (shutting_down_) return send_error(*exchange, RequestError(503, "", "the server is shutting down", "server_error"));
    return exchange->respond(HttpResponse{200, "text/plain", "", {}});
  }
  if (path == "/metrics") {
    if (!expect_method("GET")) return;
    engine::EngineStats stats = engine_->stats();
    // The engine's stats are those of its last step, all zero before the first: the pool's size is known from the
    // start, and a scrape before any request must show it.
    if (stats.steps == 0) stats.total_blocks = engine_config_.pool.blocks;
    std::optional<cache::PrefixCacheStats> cache_stats;
    if (engine_config_.cache) cache_stats = engine_config_.cache->stats();
    std::optional<text::grammar::GrammarCacheStats> grammar_stats;
    if (grammars_ready_.load(std::memory_order_acquire)) grammar_stats = grammars_->stats();
    return exchange->respond(HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8",
                                          metrics_.render(stats, engine_config_.pool.max_sequences,
                                                          static_cast<int64_t>(http_->open_connections()),
                                                          cache_stats ? &*cache_stats : nullptr,
                                                          grammar_stats ? &*grammar_stats : nullptr),
                                          {}});
  }
  if (path == "/strata/v1/load") {
    if (!expect_method("GET")) return;
    const int64_t in_flight = static_cast<int64_t>(requests_.size() + exports_.size()) + preparing_;
    LoadReport report = make_load_report(engine_->stats(), engine_config_.pool.blocks, engine_config_.cache.get(),
                                         model_.state_layout().block_tokens, in_flight);
    report.role = cfg_.role;
    return exchange->respond(json_response(200, load_report_body(report)));
  }
  const bool chat = path == "/v1/chat/completions", completions = path == "/v1/completions";
  const bool models = path == "/v1/models", one_model = path.rfind("/v1/models/", 0) == 0;
  const bool prefill = path == disagg::kPrefillPath, release = path == disagg::kReleasePath;
  if (!chat && !completions && !models && !one_model && !prefill && !release)
    return send_error(*exchange, RequestError(404, "", cat("no route for ", req.method, " ", path), "invalid_request_error", "not_found"));
  const std::optional<size_t> key = authorized(req);
  if (!key)
    return send_error(*exchange, RequestError(401, "", "invalid or missing API key (send the header 'Authorization: Bearer KEY')",
                                              "invalid_request_error", "invalid_api_key"));
  if (models || one_model) {
    if (!expect_method("GET")) return;
    if (models) return exchange->respond(json_response(200, models_body(nullptr)));
    const std::string name = path.substr(std::string("/v1/models/").size());
    if (name != cfg_.served_model_name)
      return send_error(*exchange, RequestError(404, "model", cat("the model '", name, "' does not exist (this server serves '",
                                                                  cfg_.served_model_name, "')"),
                                                "invalid_request_error", "model_not_found"));
    return exchange->respond(json_response(200, models_body(&name)));
  }
  if (!expect_method("POST")) return;
  if (release) return release_shared(*exchange);  // also while shutting down: it frees memory
  if (shutting_down_)
    return send_error(*exchange, RequestError(503, "", "the server is shutting down", "server_error"));
  if (prefill && cfg_.role == disagg::Role::Decode)
    return send_error(*exchange, RequestError(400, "", cat("this replica's role is decode: it does not prefill for others (",
                                                           disagg::kPrefillPath, ")"),
                                              "invalid_request_error", "wrong_role"));
  if (!prefill && cfg_.role == disagg::Role::Prefill)
    return send_error(*exchange, RequestError(400, "", cat("this replica's role is prefill: it answers ", disagg::kPrefillPath,
                                                           " for decode replicas, not completions"),
                                              "invalid_request_error", "wrong_role"));
  ++preparing_;
  if (prefill) return workers_->post([this, exchange, k = *key] { prefill_for_peer(exchange, k); });
  const Endpoint endpoint = chat ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  workers_->post([this, exchange, endpoint, arrival = Clock::now(), k = *key] { prepare(exchange, endpoint, arrival, k); });
}

// ---------------------------------------------------------------------------------------------------------------
// Admission: parse, tokenize and check limits on a worker; submit on the I/O thread.

text::grammar::GrammarCache& Server::grammars() {
  std::call_once(grammars_once_, [this] {
    grammars_ = make_grammar_cache(tokenizer_, cfg_.grammar_limits);
    grammars_ready_.store(true, std::memory_order_release);
  });
  return *grammars_;
}

void Server::refuse_prepared(std::shared_ptr<HttpExchange> exchange, const RequestError& error) {
  http_->post([this, exchange, e = error] {
    --preparing_;
    send_error(*exchange, e);
    maybe_finish_shutdown();
  });
}

void Server::prepare(std::shared_ptr<HttpExchange> exchange, Endpoint endpoint, Clock::time_point arrival, size_t key) {
  auto prepared = std::make_shared<Prepared>();
  prepared->exchange = exchange;
  prepared->key = key;
  prepared->arrival = arrival;
  std::optional<RequestError> error;
  try {
    prepared->request = parse_completion_request(endpoint, exchange->request().body, cfg_.limits);
    TokenizedPrompts tokenized = tokenize_prompts(
        prepared->request, tokenizer_,
        {engine_config_.max_model_len, model_.config().vocab_size, cfg_.served_model_name, true,
         needs_grammars(prepared->request) ? &grammars() : nullptr});
    prepared->prompts = std::move(tokenized.prompts);
    prepared->max_tokens = std::move(tokenized.max_tokens);
    prepared->echo = std::move(tokenized.echo);
    prepared->constraint = std::move(tokenized.constraint);
  } catch (const RequestError& e) {
    error = e;
  } catch (const Error& e) {
    error = RequestError(500, "", cat("internal error: ", e.what()), "server_error");
  } catch (const std::exception& e) {
    error = RequestError(500, "", cat("internal error: ", e.what()), "server_error");
  }
  if (error) return refuse_prepared(exchange, *error);
  if (transfers_) {
    const std::string* named = exchange->request().header(disagg::kPrefillPeerHeader);
    const std::string peer = named ? *named : cfg_.prefill_peer;
    if (!peer.empty()) {
      // Admitted now: each sequence takes its slot and blocks while its state streams in (engine/sequence.h).
      prepared->incoming.resize(prepared->prompts.size());
      for (size_t p = 0; p < prepared->prompts.size(); ++p)
        if (prepared->prompts[p].size() >= 2)  // else nothing to prefill but the token that is sampled from
          prepared->incoming[p] = std::make_shared<engine::StateStream>();
      transfers_->post([this, prepared, peer] { fetch_states(prepared, peer); });
    }
  }
  http_->post([this, prepared] { admit(prepared); });
}

void Server::fetch_states(std::shared_ptr<Prepared> prepared, const std::string& peer) {
  const engine::CacheOptions cache = cache_options(*prepared);
  const std::shared_ptr<HttpExchange> exchange = prepared->exchange;
  disagg::TransferControl control;
  control.deadline = Clock::now() + cfg_.transfer_timeout;
  control.cancelled = [this, exchange] { return cancel_transfers_.load() || exchange->peer_gone(); };
  if (const std::string* auth = exchange->request().header("Authorization")) control.authorization = *auth;
  // Every stream ends, finished or failed: a sequence waiting on it computes its prompt itself after a failure.
  std::string skip;
  for (size_t p = 0; p < prepared->prompts.size(); ++p) {
    const std::shared_ptr<engine::StateStream>& stream = prepared->incoming[p];
    if (!stream) continue;
    if (!skip.empty()) {
      stream->fail(skip);
      continue;
    }
    const std::vector<int32_t>& prompt = prepared->prompts[p];
    disagg::PrefillOrder order;
    order.request_id = cat("prefill-", p);
    order.tokens.assign(prompt.begin(), prompt.end() - 1);
    order.cache = cache.enabled;
    order.cache_scope = cache.scope;
    order.cache_ttl_seconds = cache.ttl_seconds;
    // A shared region has one reader: n > 1 sequences (each restoring at its own admission) get every byte.
    if (cfg_.shared_transfer && prepared->request.sampling.n == 1) {
      order.shared_floats = true;
      // Past the deadline nothing here reads the region; the margin covers a restore under way at that moment.
      order.lease_ms = std::chrono::duration_cast<std::chrono::milliseconds>(control.deadline - Clock::now()).count() + 30000;
      stream->on_shared_released([this, peer, stream = std::weak_ptr<engine::StateStream>(stream), control] {
        const std::shared_ptr<engine::StateStream> s = stream.lock();
        const std::string handle = s ? s->shared_floats() : std::string();
        if (handle.empty()) return;  // answered with every byte in the body
        transfers_->post([this, peer, handle, control] {
          disagg::TransferControl quick = control;
          quick.cancelled = {};
          quick.deadline = Clock::now() + std::chrono::seconds(5);
          try {
            transport_->release(peer, handle, quick);
          } catch (const disagg::TransferError& e) {
            std::fprintf(stderr, "strata: releasing %s on %s failed (%s); its lease ends it\n", handle.c_str(),
                         peer.c_str(), e.what());
          }
        });
      });
    }
    const Clock::time_point start = Clock::now();
    try {
      const disagg::PrefilledState got = transport_->prefill(peer, order, control, *stream);
      stream->finish();
      metrics_.transfer_succeeded(got.bytes, seconds_between(start, Clock::now()));
    } catch (const disagg::TransferError& e) {
      stream->fail(e.what());
      metrics_.transfer_failed(disagg::to_string(e.kind()));
      if (e.kind() != disagg::TransferError::Kind::Cancelled)
        std::fprintf(stderr, "strata: prefill on %s failed (%s); computing the prompt here\n", peer.c_str(), e.what());
      if (e.kind() == disagg::TransferError::Kind::Cancelled || e.kind() == disagg::TransferError::Kind::Timeout)
        skip = cat("not fetched: an earlier transfer of the request ended (", disagg::to_string(e.kind()), ")");
    } catch (const std::exception& e) {
      stream->fail(e.what());
      metrics_.transfer_failed("protocol");
      std::fprintf(stderr, "strata: prefill on %s failed (%s); computing the prompt here\n", peer.c_str(), e.what());
    }
  }
}

void Server::prefill_for_peer(std::shared_ptr<HttpExchange> exchange, size_t key) {
  std::optional<RequestError> error;
  disagg::PrefillOrder order;
  try {
    order = disagg::parse_prefill_order(exchange->request().body);
    // A caller may ask for another tenant's cache scope only by holding its key.
    if (!cfg_.api_keys.empty() && cfg_.cache_scope_per_key && order.cache &&
        order.cache_scope.rfind(api_key_scope(cfg_.api_keys[key]), 0) != 0)
      error = RequestError(403, "cache_scope", "the cache scope belongs to another API key", "invalid_request_error",
                           "wrong_scope");
  } catch (const Error& e) {
    error = RequestError(400, "", e.what());
  }
  if (error) return refuse_prepared(exchange, *error);
  engine::CacheOptions cache;
  cache.enabled = order.cache;
  cache.scope = order.cache_scope;
  cache.ttl_seconds = order.cache_ttl_seconds;
  http_->post([this, exchange, order = std::move(order), cache]() mutable {
    --preparing_;
    submit_prefill(exchange, std::move(order), cache);
  });
}

void Server::submit_prefill(std::shared_ptr<HttpExchange> exchange, disagg::PrefillOrder order,
                            engine::CacheOptions cache) {
  std::vector<int32_t> tokens = std::move(order.tokens);
  if (shutting_down_) {
    send_error(*exchange, RequestError(503, "", "the server is shutting down", "server_error"));
    return maybe_finish_shutdown();
  }
  if (exchange->peer_gone()) return maybe_finish_shutdown();
  const std::string id = cat("prefill-", next_export_++);
  const auto count = static_cast<int64_t>(tokens.size());
  engine::SamplingParams params;
  params.max_tokens = 1;  // the decode replica's first token: counted against max_model_len like any other
  auto exported = std::make_shared<Export>();
  exported->exchange = exchange;
  exported->stream = std::make_shared<engine::StateStream>();
  exported->tokens = count;
  exported->lease = std::chrono::milliseconds(order.lease_ms);
  engine::StateHandoff handoff;
  handoff.export_to = exported->stream;
  handoff.export_shared = order.shared_floats;
  // Each piece goes out as it comes off the device (the engine thread appends them, the I/O thread sends them).
  exported->stream->on_change([this, id] { http_->post([this, id] { send_export(id); }); });
  try {
    engine_->submit(id, std::move(tokens), params, [](const engine::TokenEvent&) {},
                    engine_config_.cache ? cache : engine::CacheOptions{}, handoff);
  } catch (const Error& e) {
    exported->stream->on_change({});
    send_error(*exchange, RequestError(400, "tokens", e.what()));
    return maybe_finish_shutdown();
  }
  exports_[id] = exported;
  // The decode replica went away (gave up, or died): the prefill is not worth finishing.
  exchange->on_peer_gone([this, id] { engine_->abort(id); });
}

void Server::send_export(const std::string& id) {
  const auto it = exports_.find(id);
  if (it == exports_.end()) return;
  Export& e = *it->second;
  const engine::StateStream::Read read = e.stream->read_from(e.sent_chunks);
  if (!e.begun && !read.chunks.empty()) {
    std::vector<HttpHeader> headers = {{std::string(disagg::kStateTokensHeader), std::to_string(e.tokens)},
                                       {std::string(disagg::kCachedTokensHeader), std::to_string(e.stream->cached_tokens())}};
    if (const std::string shared = e.stream->shared_floats(); !shared.empty())
      headers.push_back({std::string(disagg::kSharedFloatsHeader), shared});
    // The region is leased before its handle goes out: the decode replica may have restored from it and asked to
    // release it before this stream's end reaches this thread.
    if (std::shared_ptr<model::SharedRegion> region = e.stream->take_shared_region()) {
      drop_expired_leases();
      const std::string handle = region->handle();  // (the assignment's right side is evaluated first)
      leases_[handle] = Lease{std::move(region), Clock::now() + e.lease};
    }
    e.exchange->begin_stream(200, "application/octet-stream", std::move(headers));
    e.begun = true;
  }
  for (const auto& chunk : read.chunks) e.exchange->write(*chunk);
  e.sent_chunks += read.chunks.size();
  if (!read.finished && !read.failed) return;
  // A prefill that failed after its first bytes ends the body where it is: the decode replica finds the state
  // incomplete and computes the prompt itself.
  if (e.begun) e.exchange->end_stream();
  else send_error(*e.exchange, RequestError(503, "", cat("the prefill failed: ", read.failed.value_or("no state")),
                                            "server_error"));
  e.stream->on_change({});
  exports_.erase(it);  // a leased region outlives the response, until released or its lease ends
  maybe_finish_shutdown();
}

void Server::drop_expired_leases() {
  const Clock::time_point now = Clock::now();
  std::erase_if(leases_, [&](const auto& lease) { return lease.second.until <= now; });
}

void Server::release_shared(HttpExchange& exchange) {
  try {
    const std::string handle = disagg::parse_release(exchange.request().body);
    const bool released = leases_.erase(handle) > 0;
    drop_expired_leases();
    exchange.respond(json_response(200, nlohmann::json{{"released", released}}.dump()));
  } catch (const Error& e) {
    send_error(exchange, RequestError(400, "handle", e.what()));
  }
}

void Server::admit(std::shared_ptr<Prepared> prepared) {
  --preparing_;
  HttpExchange& exchange = *prepared->exchange;
  const CompletionRequest& r = prepared->request;
  const bool chat = r.endpoint == Endpoint::kChatCompletions;
  if (shutting_down_) {
    send_error(exchange, RequestError(503, "", "the server is shutting down", "server_error"));
    return maybe_finish_shutdown();
  }
  if (exchange.peer_gone()) return maybe_finish_shutdown();

  auto request = std::make_shared<ActiveRequest>();
  request->id = new_response_id(r.endpoint);
  request->exchange = prepared->exchange;
  request->streaming = r.stream;
  request->arrival = prepared->arrival;
  std::vector<int64_t> prompt_tokens;
  for (const auto& p : prepared->prompts) prompt_tokens.push_back(static_cast<int64_t>(p.size()));
  request->stream = std::make_unique<CompletionStream>(r, tokenizer_, request->id, unix_now(), cfg_.served_model_name,
                                                       prompt_tokens, prepared->echo);
  const size_t choices = request->stream->num_choices();
  request->sequence_done.assign(choices, true);
  request->first_token.resize(choices);
  request->last_token.resize(choices);
  for (size_t c = 0; c < choices; ++c) request->sequence_ids.push_back(cat(request->id, "-", c));
  requests_[request->id] = request;

  const auto n = static_cast<size_t>(r.sampling.n);
  const engine::CacheOptions cache = cache_options(*prepared);
  for (size_t c = 0; c < choices; ++c) {
    const size_t p = c / n, i = c % n;
    engine::SamplingParams params = r.sampling;
    params.n = 1;
    params.max_tokens = prepared->max_tokens[p];
    params.constraint = prepared->constraint;
    if (r.sampling.seed) params.seed = *r.sampling.seed + i;
    engine::StateHandoff handoff;
    if (p < prepared->incoming.size()) handoff.incoming = prepared->incoming[p];
    try {
      engine_->submit(request->sequence_ids[c], prepared->prompts[p], params,
                      [this, request, c](const engine::TokenEvent& event) {
                        step_events_.push_back({request, c, event});
                      },
                      cache, handoff);
      request->sequence_done[c] = false;
    } catch (const Error& e) {
      request->failed = true;
      for (size_t k = 0; k < c; ++k) engine_->abort(request->sequence_ids[k]);
      const std::string message = e.what();
      if (message.find("shutting down") != std::string::npos)
        send_error(exchange, RequestError(503, "", message, "server_error"));
      else
        send_error(exchange, as_request_error(e, chat ? "messages" : (prepared->prompts.size() > 1 ? cat("prompt[", p, "]") : "prompt")));
      break;
    }
  }
  if (request->failed) {
    request->answered = true;
    if (request->all_sequences_done()) requests_.erase(request->id);
    return maybe_finish_shutdown();
  }
  metrics_.request_received();
  if (request->streaming) {
    exchange.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    exchange.write(request->stream->begin_sse());
  }
  std::weak_ptr<ActiveRequest> weak = request;
  exchange.on_peer_gone([this, weak] {
    if (auto req = weak.lock()) on_client_gone(req);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Engine events (I/O thread)

// Engine thread: one post per step rather than one per token (a batch of 256 streams posts once, not 256 times).
void Server::hand_off_step_events() {
  auto batch = std::make_shared<std::vector<StepEvent>>(std::move(step_events_));
  step_events_.clear();
  step_events_.reserve(batch->size());
  http_->post([this, batch] {
    for (const StepEvent& e : *batch) on_event(e.request, e.choice, e.event);
  });
}

void Server::on_event(const std::shared_ptr<ActiveRequest>& request, size_t choice, const engine::TokenEvent& event) {
  ActiveRequest& r = *request;
  const Clock::time_point now = Clock::now();
  if (event.token) {
    if (!r.any_token) {
      r.any_token = true;
      metrics_.observe_time_to_first_token(seconds_between(r.arrival, now));
    }
    if (r.first_token[choice] == Clock::time_point{}) r.first_token[choice] = now;
    r.last_token[choice] = now;
  }
  if (event.finished) r.sequence_done[choice] = true;
  const StreamUpdate update = r.stream->on_event(choice, event);
  if (update.abort_sequence) engine_->abort(r.sequence_ids[choice]);
  if (update.choice_finished) {
    const int64_t tokens = r.stream->choice_tokens(choice);
    if (tokens > 1)
      metrics_.observe_time_per_output_token(seconds_between(r.first_token[choice], r.last_token[choice]) /
                                             static_cast<double>(tokens - 1));
  }
  if (r.streaming && !r.failed && !update.sse.empty()) r.exchange->write(update.sse);
  if (!r.answered && !r.failed && r.stream->done()) complete(r);
  if (r.answered && r.all_sequences_done()) {
    requests_.erase(r.id);
    maybe_finish_shutdown();
  }
}

void Server::complete(ActiveRequest& r) {
  r.answered = true;
  const CompletionStream& s = *r.stream;
  std::vector<std::string> reasons;
  bool aborted = false;
  for (size_t c = 0; c < s.num_choices(); ++c) {
    reasons.push_back(s.finish_reason(c));
    aborted = aborted || s.finish_reason(c) == "abort";
  }
  const Usage usage = s.usage();
  metrics_.request_finished(reasons, usage.prompt_tokens, usage.completion_tokens);
  metrics_.observe_e2e_latency(seconds_between(r.arrival, Clock::now()));
  if (r.streaming) {
    r.exchange->write(s.end_sse());
    r.exchange->end_stream();
  } else if (aborted && r.shutdown_abort) {
    send_error(*r.exchange, RequestError(503, "", "the server is shutting down; the request was aborted", "server_error"));
  } else {
    r.exchange->respond(json_response(200, s.response_body()));
  }
}

void Server::on_client_gone(const std::shared_ptr<ActiveRequest>& request) {
  for (size_t c = 0; c < request->sequence_ids.size(); ++c)
    if (!request->sequence_done[c]) engine_->abort(request->sequence_ids[c]);
}

// ---------------------------------------------------------------------------------------------------------------
// Shutdown

void Server::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(done_mu_);
    if (stopped_) return;
  }
  http_->post([this, grace] { begin_shutdown(grace); });
}

void Server::begin_shutdown(std::chrono::milliseconds grace) {
  if (shutting_down_) {
    if (grace.count() == 0) abort_all();
    return;
  }
  shutting_down_ = true;
  http_->stop_accepting();
  if (grace.count() == 0) abort_all();
  else http_->post_after(grace, [this] { abort_all(); });
  maybe_finish_shutdown();
}

void Server::abort_all() {
  cancel_transfers_ = true;
  for (const auto& [id, exported] : exports_) engine_->abort(id);
  for (const auto& [id, request] : requests_) {
    request->shutdown_abort = true;
    for (size_t c = 0; c < request->sequence_ids.size(); ++c)
      if (!request->sequence_done[c]) engine_->abort(request->sequence_ids[c]);
  }
}

void Server::maybe_finish_shutdown() {
  if (!shutting_down_ || !requests_.empty() || !exports_.empty() || preparing_ > 0) return;
  std::lock_guard lock(done_mu_);
  drained_ = true;
  done_cv_.notify_all();
}

void Server::wait() {
  {
    std::unique_lock lock(done_mu_);
    if (stopped_) return;
    if (!http_->running()) drained_ = true;  // never started: nothing to drain
    done_cv_.wait(lock, [&] { return drained_; });
  }
  // Every response has been handed to its connection; give the connections a moment to write it and close.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  while (http_->open_connections() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  workers_->stop();
  if (transfers_) transfers_->stop();
  engine_->shutdown(false);
  http_->stop();
  std::lock_guard lock(done_mu_);
  stopped_ = true;
}

}  // namespace strata::server
