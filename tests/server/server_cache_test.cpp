// The prefix cache through the HTTP server: a repeated prompt is served from the cache with the same answer and
// logprobs, the usage says how many prompt tokens were cached (OpenAI's and DeepSeek's fields), API keys and
// prompt_cache_key isolate tenants, /metrics counts hits by tier, and bad cache fields are 400s.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/deepseek_v4/model.h"
#include "server/server.h"
#include "server/http_test_client.h"
#include "server/served_model.h"
#include "server/served_server.h"

namespace strata::server {
namespace {

using json = nlohmann::json;
using test::HttpReply;
using test::HttpTestClient;
using test::http_request;

class ServerCache : public test::ServedServer<ServerCache> {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_tokenizer()) return;
    engine::EngineConfig ec;
    ec.max_model_len = 4096;
    ec.pool = {8, 64};
    ServerConfig sc;
    sc.port = 0;
    sc.api_keys = {"alice-key", "bob-key"};
    start(test::served_model_dir(), ec, sc, [](engine::EngineConfig& e, const model::v4::Model& model) {
      cache::CacheConfig cc;
      cc.store.writer_thread = false;
      e.cache = std::make_shared<cache::PrefixCache>(model, cc);
    });
  }
  void SetUp() override {
    skip_unless_started("needs the DeepSeek tokenizer in " + test::tokenizer_v3_dir() + " (scripts/setup.sh)");
  }
  static HttpReply send(const std::string& method, const std::string& path, const std::string& body,
                        const std::string& key) {
    return request(method, path, body, {"Authorization: Bearer " + key});
  }
  static json complete(const json& body, const std::string& key = "alice-key", int status = 200) {
    const HttpReply reply = send("POST", "/v1/completions", body.dump(), key);
    EXPECT_EQ(reply.status, status) << reply.body;
    return json::parse(reply.body);
  }
  static json prompt_body(int64_t len, int64_t salt) {
    std::vector<int32_t> ids = test::token_ids(len, salt);
    for (int32_t& t : ids) t += 1000;  // ordinary tokens of the DeepSeek vocabulary
    return {{"prompt", ids}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}};
  }
  static int64_t cached(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); }
};

TEST_F(ServerCache, ARepeatedPromptIsServedFromTheCacheWithTheSameAnswer) {
  const json body = prompt_body(300, 1);
  const json cold = complete(body), hit = complete(body);
  EXPECT_EQ(cached(cold), 0);
  EXPECT_EQ(cold["usage"]["prompt_cache_miss_tokens"], 300);
  EXPECT_EQ(cached(hit), 256);  // the last 128-token block boundary short of the prompt's end
  EXPECT_EQ(hit["usage"]["prompt_cache_hit_tokens"], 256);
  EXPECT_EQ(hit["usage"]["prompt_cache_miss_tokens"], 44);
  EXPECT_EQ(hit["choices"][0]["text"], cold["choices"][0]["text"]);
  EXPECT_EQ(hit["choices"][0]["logprobs"], cold["choices"][0]["logprobs"]);  // the same doubles, printed alike

  // The first request's blocks stayed in the state pool (kept after it finished): the hit shares them there.
  const HttpReply metrics = send("GET", "/metrics", "", "");
  EXPECT_NE(metrics.body.find("strata_prefix_cache_hit_tokens_total{model_name=\"model\",tier=\"gpu\"} 256"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("strata_state_pool_kept_blocks{model_name=\"model\"} "), std::string::npos);
}

TEST_F(ServerCache, KeysAndPromptCacheKeysIsolateTenants) {
  json body = prompt_body(200, 2);
  complete(body, "alice-key");
  EXPECT_EQ(cached(complete(body, "bob-key")), 0);
  EXPECT_EQ(cached(complete(body, "alice-key")), 128);
  body["prompt_cache_key"] = "project-7";
  EXPECT_EQ(cached(complete(body, "alice-key")), 0);
  EXPECT_EQ(cached(complete(body, "alice-key")), 128);
}

TEST_F(ServerCache, CacheFieldsAreCheckedAndHonoured) {
  json body = prompt_body(150, 3);
  body["prompt_cache_retention"] = "soon";
  json e = complete(body, "alice-key", 400);
  EXPECT_EQ(e["error"]["param"], "prompt_cache_retention");
  body["prompt_cache_retention"] = "24h";
  body["cache_class"] = "batch";
  e = complete(body, "alice-key", 400);
  EXPECT_EQ(e["error"]["param"], "cache_class");
  body["cache_class"] = "agent";
  EXPECT_EQ(cached(complete(body)), 0);
  body["prompt_cache_retention"] = "in-memory";
  EXPECT_EQ(cached(complete(body)), 128);
}

}  // namespace
}  // namespace strata::server
