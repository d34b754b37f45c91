#pragma once
// The OpenAI-compatible server over one engine: routes, API-key check, request admission, and graceful shutdown.
//
// Threads: the HTTP server's I/O thread owns every request's state (routing, engine events, stream chunks); a
// couple of worker threads parse, validate and tokenize request bodies so a long prompt never stalls the I/O
// loop; the engine runs on its own thread and its token events are posted to the I/O thread.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models[/ID] (API key required when set);
// GET /health, GET /metrics, GET /strata/v1/load (the load report a router reads: server/load_report.h) (open).
// Prefill/decode disaggregation: POST /strata/v1/prefill (disagg/prefill_order.h) on roles prefill and both; a
// completion on roles decode and both has its prompt prefilled by a prefill replica when one is named, and computes
// it here when that fails (the client sees no error).
//
// Each choice of a request (n > 1, or a batch of prompts) is its own engine sequence ("<id>-<choice>", seed + i
// when seeded — the same tokens the engine's own n would give), so a choice that hits a stop string is aborted
// alone and its state freed at once.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "disagg/replica_role.h"
#include "disagg/state_transport.h"
#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "text/grammar/grammar_cache.h"

namespace strata::text {
class Tokenizer;
}

namespace strata::server {

class WorkerPool;

struct ServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                 // 0: an ephemeral port (see Server::port)
  std::string served_model_name = "model";
  std::vector<std::string> api_keys;     // any of them is accepted; none: no check
  // With API keys, each key's requests see only the prefix-cache entries made under that key (a shared cache is a
  // timing side channel between tenants); false: one cache for all.
  bool cache_scope_per_key = true;
  size_t max_body_bytes = 8u << 20;
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(5)};
  ProtocolLimits limits;
  int prepare_threads = 2;              // threads that parse and tokenize request bodies
  text::grammar::GrammarCacheLimits grammar_limits;  // structured outputs: the compile cache's caps

  // Prefill/decode disaggregation (docs/disaggregation.md).
  disagg::Role role = disagg::Role::Both;
  // The prefill replica (http://HOST:PORT) for requests that name none (header X-Strata-Prefill); empty: none, the
  // prompts are computed here. Only roles both and decode use one.
  std::string prefill_peer;
  std::chrono::milliseconds transfer_timeout{std::chrono::seconds(60)};  // per prompt, the remote prefill included
  int transfer_threads = 16;  // transfers in flight at once (each waits on its socket)
  // Decode side, with the prefill replica on this host: ask for the state's floats in a shared region (CUDA IPC,
  // POSIX shared memory) and only its skeleton over the socket (a prompt with n > 1 still gets all its bytes).
  bool shared_transfer = false;
  std::shared_ptr<disagg::StateTransport> transport;  // null: TCP
};

class Server {
 public:
  // Starts the engine thread and binds the listening socket (strata::Error if that fails); serving starts with
  // start().
  Server(const model::Model& model, const text::Tokenizer& tokenizer, engine::EngineConfig engine_config,
         ServerConfig config);
  ~Server();  // shutdown(0) and wait()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const { return http_->port(); }
  void start();

  // Graceful shutdown (any thread, returns at once): stop accepting connections and requests (new ones get 503);
  // let in-flight requests finish for up to `grace`; then abort the rest — a stream gets a last chunk with
  // finish_reason "abort" and [DONE], a non-stream request a 503 error. A second call with grace 0 aborts at once.
  void shutdown(std::chrono::milliseconds grace);
  // Blocks until shutdown has completed: every request answered, the engine and the I/O thread stopped.
  void wait();
  bool stopped() const;

  engine::EngineStats engine_stats() const { return engine_->stats(); }
  size_t open_connections() const { return http_->open_connections(); }

 private:
  struct ActiveRequest;
  struct Prepared;

  void handle(std::shared_ptr<HttpExchange> exchange);
  void send_error(HttpExchange& exchange, const RequestError& error);
  // The index of the API key the request carries (0 without keys), or nullopt when it is not authorized.
  std::optional<size_t> authorized(const HttpRequest& request) const;
  engine::CacheOptions cache_options(const Prepared& prepared) const;
  void prepare(std::shared_ptr<HttpExchange> exchange, Endpoint endpoint, std::chrono::steady_clock::time_point arrival,
               size_t key);
  // A request that a worker refused: its error, answered on the I/O thread.
  void refuse_prepared(std::shared_ptr<HttpExchange> exchange, const RequestError& error);
  // Decode side (a transfer thread): the prompts' states from the prefill replica `peer`, then admit().
  void fetch_states(std::shared_ptr<Prepared> prepared, const std::string& peer);
  // Prefill side: POST /strata/v1/prefill, parsed on a worker and submitted on the I/O thread.
  void prefill_for_peer(std::shared_ptr<HttpExchange> exchange, size_t key);
  void submit_prefill(std::shared_ptr<HttpExchange> exchange, disagg::PrefillOrder order, engine::CacheOptions cache);
  void release_shared(HttpExchange& exchange);  // POST /strata/v1/prefill/release
  void drop_expired_leases();                  // I/O thread: shared regions whose lease has ended
  void send_export(const std::string& id);  // I/O thread: what has come of an export goes out
  void admit(std::shared_ptr<Prepared> prepared);
  void on_event(const std::shared_ptr<ActiveRequest>& request, size_t choice, const engine::TokenEvent& event);
  void hand_off_step_events();
  void complete(ActiveRequest& request);
  void on_client_gone(const std::shared_ptr<ActiveRequest>& request);
  void abort_all();
  void begin_shutdown(std::chrono::milliseconds grace);
  void maybe_finish_shutdown();
  std::string models_body(const std::string* only) const;
  // The grammar cache, built the first time a request needs it (its vocabularies take a moment): worker threads.
  text::grammar::GrammarCache& grammars();

  const model::Model& model_;
  const text::Tokenizer& tokenizer_;
  engine::EngineConfig engine_config_;
  ServerConfig cfg_;
  int64_t created_;
  Metrics metrics_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<engine::AsyncEngine> engine_;
  std::unique_ptr<WorkerPool> workers_;
  std::unique_ptr<WorkerPool> transfers_;           // decode side: waiting on prefill replicas
  std::shared_ptr<disagg::StateTransport> transport_;
  std::atomic<bool> cancel_transfers_{false};       // shutdown without grace: give up waiting, compute here
  std::once_flag grammars_once_;
  std::unique_ptr<text::grammar::GrammarCache> grammars_;
  std::atomic<bool> grammars_ready_{false};  // grammars_ is built (the I/O thread reads its stats for /metrics)

  // Engine thread only: this step's events, handed to the I/O thread together once the step's callbacks ran.
  struct StepEvent {
    std::shared_ptr<ActiveRequest> request;
    size_t choice;
    engine::TokenEvent event;
  };
  std::vector<StepEvent> step_events_;

  // I/O thread only.
  std::map<std::string, std::shared_ptr<ActiveRequest>> requests_;
  // Prefill side: states being computed and sent, by id.
  struct Export {
    std::shared_ptr<HttpExchange> exchange;
    std::shared_ptr<engine::StateStream> stream;
    int64_t tokens = 0;
    size_t sent_chunks = 0;
    bool begun = false;  // the response's head is out
    std::chrono::milliseconds lease{0};  // a shared region's, once the state is out
  };
  std::map<std::string, std::shared_ptr<Export>> exports_;
  // Prefill side: shared regions (same-host transfers) kept for their decode replicas until released or their
  // lease ends, by handle.
  struct Lease {
    std::shared_ptr<model::SharedRegion> region;
    std::chrono::steady_clock::time_point until;
  };
  std::map<std::string, Lease> leases_;
  uint64_t next_export_ = 0;
  int64_t preparing_ = 0;  // bodies handed to the workers and not admitted yet
  bool shutting_down_ = false;

  mutable std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool drained_ = false, stopped_ = false;
};

}  // namespace strata::server
