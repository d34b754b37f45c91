#pragma once
// The router: an OpenAI-compatible front door over N replicas of `strata serve` (docs/router.md). The same API;
// streams are passed through chunk for chunk.
//
// Threads: the front HTTP server's I/O thread (server/http_server.h) runs everything — parsing each completion
// request (and, for cache-aware routing, tokenizing it as the replicas do), the replicas' health and load reports,
// the prefix index, the policy's decision, and the upstream connections (Boost.Asio coroutines on the same event
// loop, kept alive per replica) — so none of that state needs a lock and no request changes threads. Only a large
// body (a long prompt) is parsed and tokenized on a second thread, so it cannot stall the streams in flight.
//
// Failure behaviour: a replica is checked every health interval (GET /strata/v1/load); it is ejected after
// `eject_after` failed checks in a row (or at once when a request cannot connect to it) and re-admitted after
// `readmit_after` good ones. A request that has had no byte back from its replica is retried on another (up to
// max_attempts); after that, a failure ends it with a clear error: a 502/503 JSON body, or in a stream an SSE error
// event. Requests open on a replica when it is ejected are ended that way at once, so a wedged replica never holds
// a client longer than its ejection takes. When every replica is saturated the answer is 429 with Retry-After.
#include <chrono>
#include <cstdint>
#include <memory>

#include "router/router_config.h"

namespace strata::router {

class Router {
 public:
  // Parses the replicas' URLs and binds the listening socket (strata::Error naming what is wrong); nothing is sent
  // until start().
  explicit Router(RouterConfig config);
  ~Router();  // shutdown(0) and wait()
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  uint16_t port() const;
  // Starts the router thread and the replicas' health checks; returns once every replica has answered its first
  // check or failed it (bounded by the health timeout), then serves.
  void start();
  // Stops accepting (new requests get 503); in-flight requests have `grace` to finish, then their connections are
  // closed. Any thread; returns at once.
  void shutdown(std::chrono::milliseconds grace);
  void wait();  // until shutdown has completed
  bool stopped() const;

  struct Impl;  // router.cpp

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::router
