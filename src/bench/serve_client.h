#pragma once
// The load generator of `strata bench serve`: streams /v1/completions (or /v1/chat/completions) requests at an
// OpenAI-compatible server and times every streamed chunk. One thread runs an Asio event loop; each request is a
// coroutine on it, over a pool of keep-alive connections, so a thousand requests in flight cost no threads.
//
// Arrivals: with a finite request_rate, request i is released at a Poisson-process time (exponential gaps, mean
// 1/rate); otherwise all are released at once. Either way at most `concurrency` are in flight; a released request
// waits for a free slot, and its clock starts when it is sent.
//
// What counts as a token chunk: an SSE event whose choice carries generated output (text, content,
// reasoning_content or tool_calls) or a finish_reason — not chat's opening role-only chunk. TTFT is the time from
// sending to the first such chunk; ITL the gaps between successive ones; E2E the time to the end of the stream.
// The generated-token count is the server's usage (the request asks for stream_options.include_usage), or the
// number of token chunks when a server sends no usage.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bench/serve_workload.h"
#include "server/server_url.h"

namespace strata::bench {

using server::ServerUrl;
using server::parse_server_url;

struct LoadConfig {
  std::string url;
  bool chat = false;          // /v1/chat/completions instead of /v1/completions
  std::string model;          // each request's "model" (empty: left out)
  std::string api_key;        // sent as "Authorization: Bearer KEY" when not empty
  int64_t concurrency = 1;    // requests in flight at most
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s, Poisson; inf: all at once
  bool ignore_eos = true;     // every request generates exactly its output_len tokens
  double temperature = 0.0;
  double timeout_s = 600;     // per request, from sending to the end of the stream
  uint64_t seed = 0;          // of the arrival times
};

struct RequestRecord {
  bool ok = false;
  std::string error;               // why it failed: "HTTP 400: {...}", "connect: ...", "timed out"
  int64_t prompt_tokens = 0;       // usage (0 when the server sends none)
  int64_t cached_tokens = 0;       // usage.prompt_tokens_details.cached_tokens: prompt tokens the server's cache held
  int64_t output_tokens = 0;       // usage, or token chunks
  int64_t chunks = 0;              // token chunks received
  double send_s = 0;               // when it was sent, since the run began
  double ttft_s = 0, e2e_s = 0;
  std::vector<double> itl_s;       // gaps between successive token chunks
};

struct LoadResult {
  std::vector<RequestRecord> requests;  // in prompt order
  double duration_s = 0;                // first send to last completion
  int64_t max_in_flight = 0;
  int64_t connections = 0;              // TCP connections opened (kept alive and reused between requests)
};

LoadResult run_load(const LoadConfig& config, const std::vector<BenchPrompt>& prompts);

// Whether one stream event's JSON payload carries output the benchmark times (some choice with a finish_reason, or
// non-empty text / content / reasoning_content / tool_calls), as the client decides it; nullopt when it is not a
// JSON object.
std::optional<bool> chunk_carries_output(const std::string& payload);

// GET /v1/models: the first model's id (what `model` should be when the user names none).
std::string first_served_model(const std::string& url, const std::string& api_key, double timeout_s = 30);

}  // namespace strata::bench
