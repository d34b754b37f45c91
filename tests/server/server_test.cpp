// The whole server in-process: a random tiny V4 model with the DeepSeek tokenizer, served on an ephemeral port,
// driven over real sockets by a raw HTTP client.
#include "server/server.h"

#include <gtest/gtest.h>

#include <thread>

#include "model/deepseek_v4/model.h"
#include "server/http_test_client.h"
#include "server/served_model.h"
#include "server/served_server.h"
#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace strata::server {
namespace {

using nlohmann::json;
using test::HttpReply;
using test::HttpTestClient;
using test::http_request;
using test::sse_payloads;

constexpr const char* kKey = "test-key";

engine::EngineConfig engine_config() {
  engine::EngineConfig c;
  c.max_model_len = 4096;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 256;
  c.pool.max_sequences = 8;
  c.pool.blocks = 64;
  return c;
}

ServerConfig server_config() {
  ServerConfig c;
  c.port = 0;
  c.served_model_name = "tiny-v4";
  c.api_keys = {kKey};
  c.max_body_bytes = 64 << 10;
  return c;
}

const json kHello = json::array({{{"role", "user"}, {"content", "Hello! Tell me a story."}}});

class ServerEndToEnd : public test::ServedServer<ServerEndToEnd> {
 protected:
  static void SetUpTestSuite() {
    if (test::have_tokenizer()) start(test::served_model_dir(), engine_config(), server_config());
  }
  void SetUp() override {
    skip_unless_started("needs the DeepSeek tokenizer in " + test::tokenizer_v3_dir() + " (scripts/setup.sh)");
  }

  static HttpReply send(const std::string& method, const std::string& path, const std::string& body = "",
                        std::vector<std::string> headers = {std::string("Authorization: Bearer ") + kKey}) {
    return request(method, path, body, headers);
  }
  static json post(const std::string& path, const json& body, int expected_status = 200) {
    return post_json(path, body, expected_status, {std::string("Authorization: Bearer ") + kKey});
  }
  static std::vector<json> stream(const std::string& path, const json& body) {
    const HttpReply reply = send("POST", path, body.dump());
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.headers.at("content-type"), "text/event-stream");
    const std::vector<std::string> payloads = sse_payloads(reply.body);
    EXPECT_FALSE(payloads.empty());
    EXPECT_EQ(payloads.back(), "[DONE]");
    std::vector<json> chunks;
    for (size_t i = 0; i + 1 < payloads.size(); ++i) chunks.push_back(json::parse(payloads[i]));
    return chunks;
  }
  static int64_t chat_prompt_tokens(const json& body) {
    return static_cast<int64_t>(text::prompt_ids(*tokenizer_, text::encode_chat_v4(body)).size());
  }
  // Waits until the engine holds no sequence and no state.
  static bool engine_idle(double timeout_s = 20) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      const engine::EngineStats s = server_->engine_stats();
      if (s.running == 0 && s.waiting == 0 && s.used_slots == 0 && s.used_blocks == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  static double metric(const std::string& name_and_labels) {
    const std::string text = send("GET", "/metrics").body;
    const size_t at = text.find("\n" + name_and_labels + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + name_and_labels.size() + 2));
  }
};

json chat_body(json extra = json::object()) {
  json body = {{"model", "tiny-v4"}, {"messages", kHello}, {"max_tokens", 8}, {"ignore_eos", true}, {"temperature", 0}};
  body.update(extra);
  return body;
}

std::string chunk_text(const std::vector<json>& chunks, const char* field = "content", size_t index = 0) {
  std::string out;
  for (const json& c : chunks)
    for (const json& choice : c["choices"])
      if (choice["index"] == index && choice.contains("delta") && choice["delta"].contains(field))
        out += choice["delta"][field].get<std::string>();
  return out;
}

std::string completion_text(const std::vector<json>& chunks, size_t index = 0) {
  std::string out;
  for (const json& c : chunks)
    for (const json& choice : c["choices"])
      if (choice["index"] == index) out += choice["text"].get<std::string>();
  return out;
}

TEST_F(ServerEndToEnd, ChatNonStream) {
  const json body = chat_body();
  const json r = post("/v1/chat/completions", body);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["model"], "tiny-v4");
  EXPECT_GT(r["created"].get<int64_t>(), 1700000000);
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["index"], 0);
  EXPECT_EQ(choice["message"]["role"], "assistant");
  EXPECT_TRUE(choice["message"]["content"].is_string());
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(choice["logprobs"], nullptr);
  EXPECT_EQ(r["usage"]["prompt_tokens"], chat_prompt_tokens(body));
  EXPECT_EQ(r["usage"]["completion_tokens"], 8);
  EXPECT_EQ(r["usage"]["total_tokens"], chat_prompt_tokens(body) + 8);
}

TEST_F(ServerEndToEnd, ChatStreamMatchesNonStreamAndEndsWithDone) {
  const json whole = post("/v1/chat/completions", chat_body());
  const std::vector<json> chunks =
      stream("/v1/chat/completions", chat_body({{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks.front()["choices"][0]["delta"]["role"], "assistant");
  const std::string id = chunks.front()["id"];
  int finishes = 0;
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(chunks[i]["id"], id);
    EXPECT_EQ(chunks[i]["usage"], nullptr);  // present and null until the usage chunk
    ASSERT_EQ(chunks[i]["choices"].size(), 1u);
    if (!chunks[i]["choices"][0]["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(chunks[i]["choices"][0]["finish_reason"], "length");
    }
  }
  EXPECT_EQ(finishes, 1);
  const json& usage_chunk = chunks.back();
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], 8);
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], whole["usage"]["prompt_tokens"]);
  EXPECT_EQ(chunk_text(chunks), whole["choices"][0]["message"]["content"].get<std::string>());

  // Without include_usage: no usage anywhere.
  for (const json& c : stream("/v1/chat/completions", chat_body({{"stream", true}}))) EXPECT_FALSE(c.contains("usage"));
}

TEST_F(ServerEndToEnd, Completions) {
  const std::string prompt = "The quick brown fox";
  const json r = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const std::vector<int32_t> ids = tokenizer_->encode(prompt, true, true);  // special tokens parsed, BOS added
  EXPECT_EQ(r["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 6);
  const std::string text = r["choices"][0]["text"];

  // The same prompt as token ids, streamed: the same text.
  const std::vector<json> chunks =
      stream("/v1/completions", {{"prompt", ids}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}});
  EXPECT_EQ(completion_text(chunks), text);
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "length");

  // echo: the prompt, then the completion.
  const json echoed =
      post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"echo", true}});
  EXPECT_EQ(echoed["choices"][0]["text"], prompt + text);

  // A batch of prompts: choices in prompt order.
  const json batch = post("/v1/completions", {{"prompt", {prompt, "Another"}}, {"max_tokens", 6}, {"temperature", 0},
                                              {"ignore_eos", true}, {"n", 2}});
  ASSERT_EQ(batch["choices"].size(), 4u);
  EXPECT_EQ(batch["choices"][0]["text"], text);
  EXPECT_EQ(batch["choices"][1]["text"], text);
  EXPECT_EQ(batch["choices"][3]["index"], 3);
  EXPECT_EQ(batch["usage"]["completion_tokens"], 24);
}

// logit_bias through the whole server: +100 on one token makes it every pick, greedy or sampled; the clients' other
// fields are accepted.
TEST_F(ServerEndToEnd, LogitBiasForcesAToken) {
  const int32_t forced = tokenizer_->encode(" fox", false, false).at(0);
  const std::string want = tokenizer_->decode({forced, forced, forced, forced}, true);
  for (const double temperature : {0.0, 1.0}) {
    const json r = post("/v1/completions", {{"prompt", "The quick brown"}, {"max_tokens", 4}, {"temperature", temperature},
                                            {"ignore_eos", true}, {"logit_bias", {{std::to_string(forced), 100}}},
                                            {"user", "u-7"}, {"metadata", {{"run", "x"}}}, {"store", false}});
    EXPECT_EQ(r["choices"][0]["text"], want) << temperature;
  }
  EXPECT_TRUE(engine_idle());
}

TEST_F(ServerEndToEnd, NChoicesAndSeeds) {
  const json body = chat_body({{"n", 2}, {"temperature", 1.0}, {"top_k", 50}, {"seed", 42}});
  const json a = post("/v1/chat/completions", body);
  const json b = post("/v1/chat/completions", body);
  ASSERT_EQ(a["choices"].size(), 2u);
  EXPECT_EQ(a["choices"][0]["index"], 0);
  EXPECT_EQ(a["choices"][1]["index"], 1);
  EXPECT_EQ(a["usage"]["completion_tokens"], 16);
  EXPECT_EQ(a["choices"], b["choices"]);  // same seed, same tokens
  // Choice i of a seeded request samples with seed + i.
  const json single = post("/v1/chat/completions", chat_body({{"temperature", 1.0}, {"top_k", 50}, {"seed", 43}}));
  EXPECT_EQ(single["choices"][0]["message"], a["choices"][1]["message"]);
  // Streamed, the same choices.
  const std::vector<json> chunks = stream("/v1/chat/completions", chat_body({{"n", 2}, {"temperature", 1.0}, {"top_k", 50}, {"seed", 42}, {"stream", true}}));
  EXPECT_EQ(chunk_text(chunks, "content", 0), a["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(chunk_text(chunks, "content", 1), a["choices"][1]["message"]["content"].get<std::string>());
}

// Byte offset of code point `n` of `s`.
size_t code_point_offset(const std::string& s, int64_t n) {
  size_t at = 0;
  for (int64_t k = 0; k < n && at < s.size(); ++k) {
    ++at;
    while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
  }
  return at;
}

TEST_F(ServerEndToEnd, StopStringsAcrossTokens) {
  const json base = {{"prompt", "Numbers and letters:"}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true},
                     {"logprobs", 0}};
  const json full = post("/v1/completions", base);
  const std::string text = full["choices"][0]["text"];
  const json& offsets = full["choices"][0]["logprobs"]["text_offset"];
  ASSERT_EQ(offsets.size(), 16u);
  // A stop string made of the last character of token k and the first of token k+1 (for the first k where both
  // tokens have text): it can only be seen across the token boundary.
  std::string stop;
  size_t stop_at = 0;
  for (size_t k = 3; k + 2 < offsets.size() && stop.empty(); ++k) {
    const int64_t boundary = offsets[k + 1];
    if (boundary <= offsets[k].get<int64_t>() || offsets[k + 2].get<int64_t>() <= boundary) continue;
    const size_t from = code_point_offset(text, boundary - 1), to = code_point_offset(text, boundary + 1);
    const std::string candidate = text.substr(from, to - from);
    if (text.find(candidate) == from) {
      stop = candidate;
      stop_at = from;
    }
  }
  ASSERT_FALSE(stop.empty()) << "no usable token boundary in " << text;

  json with_stop = base;
  with_stop["stop"] = {stop};
  with_stop.erase("logprobs");
  const json cut = post("/v1/completions", with_stop);
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, stop_at));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");

  with_stop["stream"] = true;
  const std::vector<json> chunks = stream("/v1/completions", with_stop);
  EXPECT_EQ(completion_text(chunks), text.substr(0, stop_at));
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "stop");

  with_stop["stream"] = false;
  with_stop["include_stop_str_in_output"] = true;
  EXPECT_EQ(post("/v1/completions", with_stop)["choices"][0]["text"], text.substr(0, stop_at + stop.size()));
  EXPECT_TRUE(engine_idle());  // the sequence cut by the stop string was aborted and freed
}

TEST_F(ServerEndToEnd, Logprobs) {
  const json r = post("/v1/chat/completions", chat_body({{"logprobs", true}, {"top_logprobs", 3}}));
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 8u);
  std::string joined;
  for (const json& entry : content) {
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
    ASSERT_EQ(entry["top_logprobs"].size(), 3u);
    EXPECT_GE(entry["top_logprobs"][0]["logprob"].get<double>(), entry["top_logprobs"][1]["logprob"].get<double>());
    EXPECT_EQ(entry["token"], entry["top_logprobs"][0]["token"]);  // greedy: the most likely token
    EXPECT_DOUBLE_EQ(entry["logprob"].get<double>(), entry["top_logprobs"][0]["logprob"].get<double>());
    for (const json& b : entry["bytes"]) joined += static_cast<char>(b.get<int>());
  }
  EXPECT_EQ(joined, r["choices"][0]["message"]["content"].get<std::string>());

  const json c = post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true},
                                          {"logprobs", 2}});
  const json& lp = c["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 5u);
  EXPECT_EQ(lp["token_logprobs"].size(), 5u);
  EXPECT_EQ(lp["text_offset"].size(), 5u);
  ASSERT_EQ(lp["top_logprobs"].size(), 5u);
  EXPECT_LE(lp["top_logprobs"][0].size(), 2u);

  // Streamed chat logprobs: the same entries, spread over the chunks.
  const std::vector<json> chunks = stream("/v1/chat/completions", chat_body({{"logprobs", true}, {"top_logprobs", 3}, {"stream", true}}));
  json streamed = json::array();
  for (const json& chunk : chunks)
    if (!chunk["choices"][0]["logprobs"].is_null())
      for (const json& e : chunk["choices"][0]["logprobs"]["content"]) streamed.push_back(e);
  EXPECT_EQ(streamed, content);
}

TEST_F(ServerEndToEnd, ErrorBodies) {
  const auto expect_error = [](const HttpReply& reply, int status, const json& param, const std::string& message_part,
                               const json& code = nullptr) {
    SCOPED_TRACE(reply.body);
    EXPECT_EQ(reply.status, status);
    EXPECT_EQ(reply.headers.at("content-type"), "application/json");
    const json e = json::parse(reply.body)["error"];
    EXPECT_EQ(e.size(), 4u);
    EXPECT_NE(e["message"].get<std::string>().find(message_part), std::string::npos);
    EXPECT_TRUE(e["type"].is_string());
    EXPECT_EQ(e["param"], param);
    EXPECT_EQ(e["code"], code);
  };
  expect_error(send("POST", "/v1/chat/completions", chat_body({{"top_p", 2}}).dump()), 400, "top_p",
               "top_p: expected a number in (0, 1], found 2");
  expect_error(send("POST", "/v1/chat/completions", chat_body({{"bogus", 1}}).dump()), 400, "bogus", "unknown parameter");
  expect_error(send("POST", "/v1/chat/completions", "{not json"), 400, nullptr, "not valid JSON");
  expect_error(send("POST", "/v1/chat/completions", chat_body({{"max_tokens", 5000}}).dump()), 400, "max_tokens",
               "at most");
  expect_error(send("POST", "/v1/completions", json{{"prompt", std::vector<int32_t>(4096, 5)}}.dump()), 400, "prompt",
               "leaves no room");
  expect_error(send("POST", "/v1/completions", json{{"prompt", {5, 999999}}}.dump()), 400, "prompt", "outside the vocabulary");
  expect_error(send("POST", "/v1/chat/completions", chat_body({{"n", 100}}).dump()), 400, "n", "at most 16");
  expect_error(send("POST", "/v1/chat/completions", chat_body({{"model", "gpt-4"}}).dump()), 404, "model",
               "does not exist", "model_not_found");
  expect_error(send("POST", "/v1/chat/completions", chat_body().dump(), {}), 401, nullptr, "API key", "invalid_api_key");
  expect_error(send("POST", "/v1/chat/completions", chat_body().dump(), {"Authorization: Bearer wrong"}), 401, nullptr,
               "API key", "invalid_api_key");
  expect_error(send("GET", "/v1/models", "", {"Authorization: test-key"}), 401, nullptr, "API key", "invalid_api_key");
  expect_error(send("GET", "/v2/everything"), 404, nullptr, "no route", "not_found");
  expect_error(send("GET", "/v1/chat/completions"), 405, nullptr, "use POST");
  json big = chat_body();
  big["messages"][0]["content"] = std::string(70 << 10, 'a');
  expect_error(send("POST", "/v1/chat/completions", big.dump()), 413, nullptr, "exceeds the limit of 65536 bytes");
  EXPECT_EQ(send("GET", "/health", "", {}).status, 200);  // open without a key
  EXPECT_TRUE(engine_idle());
}

TEST_F(ServerEndToEnd, ModelsHealthMetrics) {
  const json models = json::parse(send("GET", "/v1/models").body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "tiny-v4");
  EXPECT_EQ(models["data"][0]["object"], "model");
  EXPECT_EQ(models["data"][0]["max_model_len"], 4096);
  EXPECT_EQ(json::parse(send("GET", "/v1/models/tiny-v4").body)["id"], "tiny-v4");
  EXPECT_EQ(send("GET", "/v1/models/other").status, 404);

  const HttpReply health = send("GET", "/health", "", {});
  EXPECT_EQ(health.status, 200);

  post("/v1/chat/completions", chat_body());
  const HttpReply metrics = send("GET", "/metrics", "", {});
  EXPECT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.headers.at("content-type").rfind("text/plain", 0), 0u);
  for (const char* name : {"strata_num_requests_running", "strata_num_requests_waiting", "strata_prompt_tokens_total",
                           "strata_generation_tokens_total", "strata_time_to_first_token_seconds",
                           "strata_time_per_output_token_seconds", "strata_e2e_request_latency_seconds",
                           "strata_state_pool_usage_ratio", "strata_num_preemptions_total"})
    EXPECT_NE(metrics.body.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  EXPECT_GE(metric("strata_generation_tokens_total{model_name=\"tiny-v4\"}"), 8);
  EXPECT_GE(metric("strata_time_to_first_token_seconds_count{model_name=\"tiny-v4\"}"), 1);
}

TEST_F(ServerEndToEnd, ClientDisconnectAbortsAndFreesState) {
  ASSERT_TRUE(engine_idle());
  const double aborts_before = metric("strata_request_success_total{model_name=\"tiny-v4\",finished_reason=\"abort\"}");
  {
    HttpTestClient c(server_->port());
    const json body = chat_body({{"max_tokens", 3000}, {"stream", true}});
    c.send(http_request("POST", "/v1/chat/completions", body.dump(), {std::string("Authorization: Bearer ") + kKey}));
    std::string seen;  // the role chunk, then at least two token chunks
    const auto events = [&] {
      size_t n = 0;
      for (size_t at = seen.find("data: "); at != std::string::npos; at = seen.find("data: ", at + 1)) ++n;
      return n;
    };
    while (events() < 3) {
      const std::string part = c.read_some(30);
      ASSERT_FALSE(part.empty());
      seen += part;
    }
    EXPECT_GE(server_->engine_stats().used_slots, 1);
  }  // the client goes away mid-stream
  EXPECT_TRUE(engine_idle(10));
  // The request ended as an abort (3000 tokens would take seconds more).
  EXPECT_EQ(metric("strata_request_success_total{model_name=\"tiny-v4\",finished_reason=\"abort\"}"), aborts_before + 1);
  // And the server is fine afterwards.
  EXPECT_EQ(post("/v1/chat/completions", chat_body())["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerEndToEnd, KeepAliveConnectionServesManyRequests) {
  HttpTestClient c(server_->port());
  for (int i = 0; i < 3; ++i) {
    c.send(http_request("POST", "/v1/chat/completions", chat_body({{"max_tokens", 2}}).dump(),
                        {std::string("Authorization: Bearer ") + kKey}));
    const HttpReply reply = c.read_reply();
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(json::parse(reply.body)["usage"]["completion_tokens"], 2);
  }
}

// The scheme of an Authorization header is case-insensitive (RFC 9110); clients send "bearer" too.
TEST_F(ServerEndToEnd, BearerSchemeInAnyCase) {
  for (const char* scheme : {"Bearer ", "bearer ", "BEARER ", "bEaReR   "})
    EXPECT_EQ(send("GET", "/v1/models", "", {std::string("Authorization: ") + scheme + kKey}).status, 200) << scheme;
  for (const char* header : {"Authorization: bearer", "Authorization: bearer ", "Authorization: bearertest-key",
                             "Authorization: basic test-key"})
    EXPECT_EQ(send("GET", "/v1/models", "", {header}).status, 401) << header;
}

// A scrape before the first request already shows the state pool's size (the engine's stats start at zero).
TEST_F(ServerEndToEnd, MetricsShowThePoolBeforeTheFirstRequest) {
  Server fresh(*model_, *tokenizer_, engine_config(), server_config());
  fresh.start();
  HttpTestClient c(fresh.port());
  c.send(http_request("GET", "/metrics"));
  const std::string body = c.read_reply().body;
  EXPECT_NE(body.find("\nstrata_state_pool_total_blocks{model_name=\"tiny-v4\"} 64\n"), std::string::npos) << body;
  EXPECT_NE(body.find("\nstrata_state_pool_total_slots{model_name=\"tiny-v4\"} 8\n"), std::string::npos) << body;
}

TEST_F(ServerEndToEnd, GracefulShutdown) {
  // A server of its own: it is shut down here.
  ServerConfig cfg = server_config();
  cfg.api_keys.clear();
  auto server = std::make_unique<Server>(*model_, *tokenizer_, engine_config(), cfg);
  server->start();
  const uint16_t port = server->port();

  // In flight when the signal comes: a long stream, a long non-stream request, and a short one.
  HttpTestClient streaming(port), waiting(port), short_one(port);
  streaming.send(http_request("POST", "/v1/chat/completions", chat_body({{"max_tokens", 3000}, {"stream", true}}).dump()));
  std::string seen = streaming.read_some(30);
  waiting.send(http_request("POST", "/v1/chat/completions", chat_body({{"max_tokens", 3000}}).dump()));
  // Short enough to finish inside the grace period even in the sanitizer build on a loaded machine.
  short_one.send(http_request("POST", "/v1/chat/completions", chat_body({{"max_tokens", 4}}).dump()));
  // All three should be in the engine before the signal (a request still being parsed would get the shutdown
  // 503); the short one may also have finished already, which the checks below accept.
  for (int i = 0; i < 10000 && server->engine_stats().running < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  server->shutdown(std::chrono::milliseconds(5000));
  // The short request finishes within the grace period.
  const HttpReply short_reply = short_one.read_reply();
  EXPECT_EQ(short_reply.status, 200);
  EXPECT_EQ(json::parse(short_reply.body)["choices"][0]["finish_reason"], "length");
  // New connections are refused.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_THROW(HttpTestClient refused(port), std::runtime_error);

  // After the grace period the rest are aborted: the stream ends with finish_reason "abort" and [DONE] ...
  for (std::string part; !(part = streaming.read_some(30)).empty();) seen += part;
  EXPECT_NE(seen.find("\"finish_reason\":\"abort\""), std::string::npos);
  EXPECT_NE(seen.find("data: [DONE]\n\n"), std::string::npos);
  EXPECT_NE(seen.find("0\r\n\r\n"), std::string::npos);  // the stream's last chunk
  // ... and the non-stream request gets a 503 error body.
  const HttpReply aborted = waiting.read_reply();
  EXPECT_EQ(aborted.status, 503);
  EXPECT_NE(json::parse(aborted.body)["error"]["message"].get<std::string>().find("shutting down"), std::string::npos);

  server->wait();
  EXPECT_TRUE(server->stopped());
  const engine::EngineStats s = server->engine_stats();
  EXPECT_EQ(s.used_slots, 0);
  EXPECT_EQ(s.used_blocks, 0);
}

}  // namespace
}  // namespace strata::server
