#pragma once
// One in-process server per test suite, driven over real sockets: the tokenizer, model and Server that
// server_test, server_cache_test and structured_outputs_test each started, stopped and sent requests to with
// copies of the same code. A suite derives from ServedServer<itself> (its own statics), calls start() from
// SetUpTestSuite when its model is present, and skip_unless_started() from SetUp.
//
//   class MySuite : public ServedServer<MySuite> {
//    protected:
//     static void SetUpTestSuite() { if (test::have_tokenizer()) start(test::served_model_dir(), engine, config); }
//     void SetUp() override { skip_unless_started("needs the DeepSeek tokenizer"); }
//   };
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/deepseek_v4/model.h"
#include "server/http_test_client.h"
#include "server/server.h"
#include "text/tokenizer.h"

namespace strata::test {

template <class Suite>
class ServedServer : public ::testing::Test {
 protected:
  // Loads the checkpoint in `model_dir` and serves it; `prepare` may finish the engine config once the model is
  // loaded (a prefix cache needs the model).
  static void start(const std::string& model_dir, engine::EngineConfig engine, const server::ServerConfig& config,
                    const std::function<void(engine::EngineConfig&, const model::v4::Model&)>& prepare = {}) {
    tokenizer_ = new text::Tokenizer(text::Tokenizer::load(model_dir));
    model_ = new model::v4::Model(model::v4::load_model(model_dir));
    if (prepare) prepare(engine, *model_);
    server_ = new server::Server(*model_, *tokenizer_, engine, config);
    server_->start();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete model_;
    delete tokenizer_;
    server_ = nullptr;
    model_ = nullptr;
    tokenizer_ = nullptr;
  }
  void skip_unless_started(const std::string& why) {
    if (!server_) GTEST_SKIP() << why;
  }

  // One request on a fresh connection.
  static HttpReply request(const std::string& method, const std::string& path, const std::string& body,
                                           const std::vector<std::string>& headers) {
    HttpTestClient c(server_->port());
    c.send(http_request(method, path, body, headers));
    return c.read_reply();
  }
  // A POST whose reply must have `expected_status`; its body as JSON.
  static nlohmann::json post_json(const std::string& path, const nlohmann::json& body, int expected_status,
                                  const std::vector<std::string>& headers) {
    const HttpReply reply = request("POST", path, body.dump(), headers);
    EXPECT_EQ(reply.status, expected_status) << reply.body;
    return nlohmann::json::parse(reply.body);
  }

  static inline text::Tokenizer* tokenizer_ = nullptr;
  static inline model::v4::Model* model_ = nullptr;
  static inline server::Server* server_ = nullptr;
};

}  // namespace strata::test
