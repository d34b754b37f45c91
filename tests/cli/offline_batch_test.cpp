// Offline batch mode (`strata generate --input`): results equal solo runs of the model, each line's record sits at
// its input position, a bad line gets an error record without stopping the batch, n > 1 choices are their own
// seeded sequences, and a record's body is what `strata serve` answers for the same request.
#include "cli/offline_batch.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "engine/sampler.h"
#include "model/deepseek_v4/model.h"
#include "model/state_pool.h"
#include "server/http_test_client.h"
#include "server/served_model.h"
#include "server/server.h"
#include "text/tokenizer.h"

namespace strata::cli {
namespace {

using nlohmann::json;

class OfflineBatch : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_tokenizer()) return;
    tokenizer_ = new text::Tokenizer(text::Tokenizer::load(test::served_model_dir()));
    model_ = new model::v4::Model(model::v4::load_model(test::served_model_dir()));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
    model_ = nullptr;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "needs the DeepSeek tokenizer in " << test::tokenizer_v3_dir() << " (scripts/setup.sh)";
  }

  static OfflineSettings settings(int64_t max_num_seqs) {
    OfflineSettings s;
    s.engine.max_model_len = 1024;
    s.engine.scheduler.max_num_seqs = max_num_seqs;
    s.engine.scheduler.max_num_batched_tokens = 64;  // long prompts are prefilled in chunks, next to decodes
    s.engine.pool.max_sequences = max_num_seqs;
    s.engine.pool.blocks = 64;
    s.limits.max_model_len = 1024;
    s.limits.served_model_name = "tiny-v4";
    return s;
  }

  // Runs `lines` and returns the output records, parsed.
  static std::vector<json> run(const std::vector<std::string>& lines, int64_t max_num_seqs = 4,
                               OfflineSummary* summary = nullptr) {
    std::ostringstream out;
    const OfflineSummary s = run_offline_batch(*model_, *tokenizer_, settings(max_num_seqs), lines, out);
    if (summary) *summary = s;
    std::vector<json> records;
    std::istringstream in(out.str());
    for (std::string line; std::getline(in, line);) records.push_back(json::parse(line));
    EXPECT_EQ(out.str().back(), '\n');
    return records;
  }

  // The tokens of one sequence run alone through Model::forward, chosen by the engine's sampler.
  static std::vector<int32_t> solo(const std::vector<int32_t>& prompt, const engine::SamplingParams& params,
                                   uint64_t seed) {
    model::SequenceState state = model_->new_sequence();
    engine::TokenHistory history;
    history.add_prompt(prompt);
    std::vector<int32_t> out;
    Mat logits = model_->forward(prompt, state, false);
    for (int64_t i = 0; i < params.max_tokens; ++i) {
      const int32_t t = engine::sample_token({logits.row(0), static_cast<size_t>(model_->config().vocab_size)}, params,
                                             history, seed, static_cast<uint64_t>(i))
                            .id;
      out.push_back(t);
      history.add_output(t);
      if (i + 1 < params.max_tokens) logits = model_->forward({t}, state, false);
    }
    return out;
  }

  static std::vector<int32_t> prompt_of(int64_t length, int32_t salt) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + salt * 131 + 17) % 100000 + 10));
    return ids;
  }

  static text::Tokenizer* tokenizer_;
  static model::v4::Model* model_;
};
text::Tokenizer* OfflineBatch::tokenizer_ = nullptr;
model::v4::Model* OfflineBatch::model_ = nullptr;

TEST_F(OfflineBatch, GreedyResultsMatchSoloRunsInInputOrder) {
  // Ten requests of different lengths through 4 slots: some wait, long prompts prefill in chunks of the 64-token
  // budget beside decodes, and requests finish out of order; the records still come in input order.
  const std::vector<int64_t> prompt_lengths = {3, 150, 1, 40, 90, 7, 200, 12, 65, 30};
  const std::vector<int64_t> max_tokens = {12, 3, 9, 1, 6, 15, 4, 10, 2, 8};
  std::vector<std::string> lines;
  for (size_t i = 0; i < prompt_lengths.size(); ++i)
    lines.push_back(json{{"custom_id", "req-" + std::to_string(i)},
                         {"prompt", prompt_of(prompt_lengths[i], static_cast<int32_t>(i))},
                         {"max_tokens", max_tokens[i]},
                         {"temperature", 0},
                         {"ignore_eos", true}}
                        .dump());
  OfflineSummary summary;
  const std::vector<json> records = run(lines, 4, &summary);
  ASSERT_EQ(records.size(), lines.size());
  int64_t generated = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const json& r = records[i];
    EXPECT_EQ(r["line"], i + 1);
    EXPECT_EQ(r["custom_id"], "req-" + std::to_string(i));
    EXPECT_EQ(r["error"], nullptr);
    ASSERT_EQ(r["response"]["status_code"], 200) << r.dump();
    const json& body = r["response"]["body"];
    EXPECT_EQ(body["object"], "text_completion");
    EXPECT_EQ(body["model"], "tiny-v4");
    EXPECT_EQ(body["usage"]["prompt_tokens"], prompt_lengths[i]);
    EXPECT_EQ(body["usage"]["completion_tokens"], max_tokens[i]);
    EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
    engine::SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = max_tokens[i];
    const std::vector<int32_t> expected = solo(prompt_of(prompt_lengths[i], static_cast<int32_t>(i)), greedy, 0);
    EXPECT_EQ(body["choices"][0]["text"], tokenizer_->decode(expected, /*skip_special=*/true)) << "request " << i;
    generated += max_tokens[i];
  }
  EXPECT_EQ(summary.requests, 10);
  EXPECT_EQ(summary.succeeded, 10);
  EXPECT_EQ(summary.failed, 0);
  EXPECT_EQ(summary.generated_tokens, generated);
  EXPECT_GT(summary.engine.steps, 0);
  EXPECT_GT(summary.engine.model_seconds, 0);
  EXPECT_GE(summary.engine.step_seconds, summary.engine.model_seconds);
  EXPECT_EQ(summary.engine.running + summary.engine.waiting + summary.engine.used_slots, 0);
}

TEST_F(OfflineBatch, BadLinesGetErrorRecordsAndTheBatchGoesOn) {
  const std::vector<std::string> lines = {
      R"({"custom_id": "ok-1", "prompt": [5, 6, 7], "max_tokens": 2, "temperature": 0})",
      "this is not json",
      R"({"custom_id": "top-p", "prompt": [5, 6, 7], "top_p": 2})",
      "",  // blank: no request, no record
      R"({"custom_id": "unknown", "prompt": [5], "frobnicate": 1})",
      R"({"custom_id": "model", "model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]})",
      R"({"custom_id": "vocab", "prompt": [5, 999999999]})",
      R"({"custom_id": "context", "prompt": [5, 6], "max_tokens": 5000})",
      R"({"custom_id": "stream", "prompt": [5, 6], "stream": true})",
      R"({"custom_id": "url", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}})",
      R"({"custom_id": "role", "messages": [{"role": "wizard", "content": "Hi"}]})",
      R"([1, 2, 3])",
      R"({"custom_id": "ok-2", "method": "POST", "url": "/v1/chat/completions",
          "body": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0}})",
      R"({"id": 42, "prompt": "plain text", "max_tokens": 2})",
  };
  OfflineSummary summary;
  const std::vector<json> records = run(lines, 4, &summary);
  ASSERT_EQ(records.size(), lines.size() - 1);
  struct Expected {
    int64_t line;
    json custom_id;
    int status;
    json param;
  };
  const std::vector<Expected> expected = {
      {1, "ok-1", 200, nullptr},        {2, nullptr, 400, nullptr},     {3, "top-p", 400, "top_p"},
      {5, "unknown", 400, "frobnicate"}, {6, "model", 404, "model"},     {7, "vocab", 400, "prompt"},
      {8, "context", 400, "max_tokens"}, {9, "stream", 400, "stream"},   {10, "url", 400, "url"},
      {11, "role", 400, nullptr},        {12, nullptr, 400, nullptr},    {13, "ok-2", 200, nullptr},
      {14, 42, 200, nullptr},
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    const json& r = records[i];
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["line"], expected[i].line);
    EXPECT_EQ(r["custom_id"], expected[i].custom_id);
    EXPECT_EQ(r["response"]["status_code"], expected[i].status);
    if (expected[i].status == 200) {
      EXPECT_EQ(r["error"], nullptr);
      continue;
    }
    // The error as the server sends it, and again at the top level.
    const json& error = r["error"];
    EXPECT_EQ(r["response"]["body"]["error"], error);
    EXPECT_FALSE(error["message"].get<std::string>().empty());
    EXPECT_EQ(error["type"], "invalid_request_error");
    if (!expected[i].param.is_null()) {
      EXPECT_EQ(error["param"], expected[i].param);
    }
  }
  EXPECT_EQ(records[9]["error"]["param"], "messages[0].role");
  EXPECT_EQ(records[11]["response"]["body"]["object"], "chat.completion");
  EXPECT_EQ(summary.requests, 13);
  EXPECT_EQ(summary.succeeded, 3);
  EXPECT_EQ(summary.failed, 10);
}

TEST_F(OfflineBatch, EngineRefusalBecomesAnErrorRecord) {
  // A prompt the state pool can never hold passes parsing but is refused by the engine at admission.
  OfflineSettings s = settings(2);
  s.engine.pool.blocks = 1;  // one token block of 128 tokens: room for the short request only
  const std::vector<std::string> lines = {
      json{{"prompt", prompt_of(900, 1)}, {"max_tokens", 4}}.dump(),
      json{{"prompt", prompt_of(3, 2)}, {"max_tokens", 2}, {"n", 2}}.dump(),
  };
  std::ostringstream out;
  const OfflineSummary summary = run_offline_batch(*model_, *tokenizer_, s, lines, out);
  std::istringstream in(out.str());
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  const json a = json::parse(first), b = json::parse(second);
  EXPECT_EQ(a["response"]["status_code"], 400) << a.dump();
  EXPECT_EQ(a["error"]["param"], "prompt");
  EXPECT_EQ(b["response"]["status_code"], 200) << b.dump();
  EXPECT_EQ(summary.failed, 1);
  EXPECT_EQ(summary.succeeded, 1);
}

TEST_F(OfflineBatch, ChoicesAreSeededSequencesLikeSoloRuns) {
  // n = 3, sampled: choice i draws from seed + i, so each equals a solo run with that seed, whatever else is in
  // the batch.
  engine::SamplingParams params;
  params.temperature = 0.9;
  params.top_k = 50;
  params.max_tokens = 10;
  params.ignore_eos = true;
  std::vector<std::string> lines;
  for (int r = 0; r < 4; ++r)
    lines.push_back(json{{"prompt", prompt_of(5 + 11 * r, r)},
                         {"n", 3},
                         {"seed", 1000 + r},
                         {"temperature", 0.9},
                         {"top_k", 50},
                         {"max_tokens", 10},
                         {"ignore_eos", true}}
                        .dump());
  const std::vector<json> records = run(lines, 5);
  ASSERT_EQ(records.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    const json& body = records[static_cast<size_t>(r)]["response"]["body"];
    ASSERT_EQ(body["choices"].size(), 3u) << body.dump();
    EXPECT_EQ(body["usage"]["completion_tokens"], 30);
    std::set<std::string> distinct;
    for (size_t i = 0; i < 3; ++i) {
      const std::vector<int32_t> expected = solo(prompt_of(5 + 11 * r, r), params, static_cast<uint64_t>(1000 + r) + i);
      EXPECT_EQ(body["choices"][i]["index"], i);
      EXPECT_EQ(body["choices"][i]["text"], tokenizer_->decode(expected, true)) << "request " << r << " choice " << i;
      distinct.insert(body["choices"][i]["text"].get<std::string>());
    }
    EXPECT_GT(distinct.size(), 1u);  // the choices really are different samples
  }
}

TEST_F(OfflineBatch, RecordBodiesAreTheServersResponses) {
  // The same requests, non-streamed, through `strata serve` (in-process) and offline: equal bodies but for id
  // and created (random and the clock).
  engine::EngineConfig ec;
  ec.max_model_len = 1024;
  ec.scheduler.max_num_seqs = 4;
  ec.pool.max_sequences = 4;
  ec.pool.blocks = 64;
  server::ServerConfig sc;
  sc.port = 0;
  sc.served_model_name = "tiny-v4";
  server::Server server(*model_, *tokenizer_, ec, sc);
  server.start();

  const std::vector<json> requests = {
      {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}}, {"max_tokens", 9}, {"temperature", 0}},
      {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 6}, {"n", 2}, {"seed", 5}, {"logprobs", true},
       {"top_logprobs", 2}},
      {{"prompt", "Once upon a time"}, {"max_tokens", 7}, {"temperature", 0}, {"echo", true}},
      {{"prompt", {"first", "second"}}, {"max_tokens", 4}, {"seed", 3}, {"logprobs", 1}},
      {{"prompt", {5, 6, 7, 8}}, {"max_tokens", 20}, {"temperature", 0}, {"stop", {"e", "a"}}},
  };
  std::vector<std::string> lines;
  for (const json& r : requests) lines.push_back(r.dump());
  const std::vector<json> records = run(lines);
  ASSERT_EQ(records.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const bool chat = requests[i].contains("messages");
    test::HttpTestClient client(server.port());
    client.send(test::http_request("POST", chat ? "/v1/chat/completions" : "/v1/completions", requests[i].dump()));
    const test::HttpReply reply = client.read_reply();
    ASSERT_EQ(reply.status, 200) << reply.body;
    json from_server = reply.json(), offline = records[i]["response"]["body"];
    for (json* body : {&from_server, &offline}) {
      body->erase("id");
      body->erase("created");
    }
    EXPECT_EQ(offline, from_server) << "request " << i;
  }
  server.shutdown(std::chrono::milliseconds(0));
  server.wait();
}

}  // namespace
}  // namespace strata::cli
