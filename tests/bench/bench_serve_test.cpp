// `strata bench serve`: the prompt datasets, the statistics, and the load generator against an in-process
// `strata serve` on the tiny model (completions and chat, Poisson arrivals, failures), and the command's JSON.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "bench/serve_client.h"
#include "bench/serve_report.h"
#include "bench/serve_workload.h"
#include "model/deepseek_v4/model.h"
#include "server/served_model.h"
#include "server/server.h"
#include "text/tokenizer.h"

namespace strata::bench {
namespace {

using nlohmann::json;

TEST(ServeWorkload, RandomPromptsAreSeededAndSized) {
  WorkloadConfig c;
  c.num_prompts = 20;
  c.input_len = 12;
  c.output_len = 5;
  c.token_lo = 100;
  c.token_hi = 200;
  c.seed = 3;
  const std::vector<BenchPrompt> a = make_workload(c), b = make_workload(c);
  ASSERT_EQ(a.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].ids, b[i].ids);
    EXPECT_EQ(a[i].ids.size(), 12u);
    EXPECT_EQ(a[i].input_len, 12);
    EXPECT_EQ(a[i].output_len, 5);
    for (int32_t id : a[i].ids) {
      EXPECT_GE(id, 100);
      EXPECT_LT(id, 200);
    }
  }
  EXPECT_NE(a[0].ids, a[1].ids);
  c.seed = 4;
  EXPECT_NE(make_workload(c)[0].ids, a[0].ids);

  c.range_ratio = 0.5;
  std::set<int64_t> lengths;
  for (const BenchPrompt& p : make_workload(c)) {
    EXPECT_GE(p.input_len, 6);
    EXPECT_LE(p.input_len, 18);
    EXPECT_EQ(static_cast<int64_t>(p.ids.size()), p.input_len);
    EXPECT_GE(p.output_len, 2);
    EXPECT_LE(p.output_len, 8);
    lengths.insert(p.input_len);
  }
  EXPECT_GT(lengths.size(), 1u);
}

TEST(ServeWorkload, SharedPrefixGroups) {
  WorkloadConfig c;
  c.dataset = "shared-prefix";
  c.num_prompts = 9;
  c.prefix_len = 10;
  c.input_len = 4;
  c.num_prefixes = 3;
  const std::vector<BenchPrompt> p = make_workload(c);
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_EQ(p[i].ids.size(), 14u);
    EXPECT_EQ(p[i].input_len, 14);
    const std::vector<int32_t> prefix(p[i].ids.begin(), p[i].ids.begin() + 10);
    const std::vector<int32_t> group(p[i % 3].ids.begin(), p[i % 3].ids.begin() + 10);
    EXPECT_EQ(prefix, group);
  }
  EXPECT_NE(std::vector<int32_t>(p[0].ids.begin(), p[0].ids.begin() + 10),
            std::vector<int32_t>(p[1].ids.begin(), p[1].ids.begin() + 10));
  EXPECT_NE(std::vector<int32_t>(p[0].ids.begin() + 10, p[0].ids.end()),
            std::vector<int32_t>(p[3].ids.begin() + 10, p[3].ids.end()));

  c.chat = true;  // words: every prompt of a group starts with the same words
  const std::vector<BenchPrompt> chat = make_workload(c);
  for (size_t i = 0; i < chat.size(); ++i) {
    EXPECT_TRUE(chat[i].ids.empty());
    const std::string& group = chat[i % 3].text;
    const size_t prefix_end = [&] {
      size_t at = 0;
      for (int w = 0; w < 10; ++w) at = group.find(' ', at) + 1;
      return at;
    }();
    EXPECT_EQ(chat[i].text.substr(0, prefix_end), group.substr(0, prefix_end));
  }
}

TEST(ServeWorkload, GrowingHistoryResendsEachConversationWithANewTurn) {
  WorkloadConfig c;
  c.dataset = "growing-history";
  c.num_prompts = 8;
  c.prefix_len = 10;
  c.input_len = 4;
  c.num_prefixes = 2;  // two conversations of four turns
  const std::vector<BenchPrompt> p = make_workload(c);
  for (size_t i = 0; i < p.size(); ++i) {
    const size_t turn = i / 2;
    ASSERT_EQ(p[i].ids.size(), 10 + 4 * (turn + 1)) << i;
    EXPECT_EQ(p[i].input_len, static_cast<int64_t>(p[i].ids.size()));
    if (turn > 0) {  // the previous turn of the same conversation is a prefix of this one
      EXPECT_EQ(std::vector<int32_t>(p[i].ids.begin(), p[i].ids.begin() + static_cast<long>(p[i - 2].ids.size())),
                p[i - 2].ids);
    }
  }
  EXPECT_NE(std::vector<int32_t>(p[0].ids.begin(), p[0].ids.begin() + 10),
            std::vector<int32_t>(p[1].ids.begin(), p[1].ids.begin() + 10));
  c.chat = true;
  const std::vector<BenchPrompt> chat = make_workload(c);
  EXPECT_EQ(chat[4].text.rfind(chat[2].text, 0), 0u);
  EXPECT_EQ(chat[4].input_len, 10 + 3 * 4);
  c.chat = false;
  c.input_len = 0;
  EXPECT_THROW(make_workload(c), Error);
}

TEST(ServeWorkload, BadConfigsNameTheField) {
  const auto error_of = [](WorkloadConfig c) {
    try {
      make_workload(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  WorkloadConfig c;
  c.dataset = "sharegpt";
  EXPECT_EQ(error_of(c).rfind("dataset:", 0), 0u);
  c = {};
  c.dataset = "shared-prefix";
  EXPECT_EQ(error_of(c).rfind("prefix-len:", 0), 0u);
  c = {};
  c.output_len = 0;
  EXPECT_EQ(error_of(c).rfind("output-len:", 0), 0u);
  c = {};
  c.token_lo = 50;
  c.token_hi = 50;
  EXPECT_EQ(error_of(c).rfind("token-ids:", 0), 0u);
  c = {};
  c.range_ratio = 1.5;
  EXPECT_EQ(error_of(c).rfind("range-ratio:", 0), 0u);
}

TEST(ServeReport, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 9.1);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 9.91);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  const Distribution d = distribution({4, 1, 3, 2});
  EXPECT_EQ(d.count, 4);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.median, 2.5);
  EXPECT_DOUBLE_EQ(d.max, 4);
  EXPECT_NEAR(d.std, std::sqrt(1.25), 1e-12);
  EXPECT_EQ(distribution({}).count, 0);
}

TEST(ServeReport, ThroughputTpotAndGoodput) {
  LoadResult r;
  r.duration_s = 2.0;
  r.max_in_flight = 2;
  const auto request = [](double ttft, double e2e, int64_t tokens, std::vector<double> itl) {
    RequestRecord q;
    q.ok = true;
    q.prompt_tokens = 10;
    q.output_tokens = tokens;
    q.ttft_s = ttft;
    q.e2e_s = e2e;
    q.itl_s = std::move(itl);
    return q;
  };
  r.requests.push_back(request(0.1, 1.1, 11, {0.1, 0.1}));  // TPOT 100 ms
  r.requests.push_back(request(0.5, 0.9, 5, {0.1}));         // TPOT 100 ms, slow first token
  r.requests.push_back(request(0.05, 0.05, 1, {}));          // one token: no TPOT
  RequestRecord failed;
  failed.error = "HTTP 500: boom";
  r.requests.push_back(failed);

  const ServeReport no_slo = summarize(r, {});
  EXPECT_EQ(no_slo.completed, 3);
  EXPECT_EQ(no_slo.failed, 1);
  EXPECT_EQ(no_slo.errors, std::vector<std::string>{"HTTP 500: boom"});
  EXPECT_EQ(no_slo.input_tokens, 30);
  EXPECT_EQ(no_slo.output_tokens, 17);
  EXPECT_DOUBLE_EQ(no_slo.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(no_slo.output_throughput, 8.5);
  EXPECT_DOUBLE_EQ(no_slo.total_token_throughput, 23.5);
  EXPECT_FALSE(no_slo.goodput.has_value());
  EXPECT_EQ(no_slo.tpot_ms.count, 2);
  EXPECT_NEAR(no_slo.tpot_ms.mean, 100, 1e-9);
  EXPECT_EQ(no_slo.itl_ms.count, 3);
  EXPECT_NEAR(no_slo.ttft_ms.median, 100, 1e-9);

  Slo slo;
  slo.ttft_ms = 200;
  const ServeReport with_slo = summarize(r, slo);
  EXPECT_EQ(with_slo.good, 2);  // the 500 ms first token misses
  ASSERT_TRUE(with_slo.goodput.has_value());
  EXPECT_DOUBLE_EQ(*with_slo.goodput, 1.0);
  slo.tpot_ms = 50;
  EXPECT_EQ(summarize(r, slo).good, 1);  // only the one-token answer (no TPOT) meets both
  const json j = report_json(with_slo);
  for (const char* key : {"completed", "failed", "duration_s", "request_throughput", "output_token_throughput",
                          "total_token_throughput", "goodput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["ttft_ms"].contains("p99"));
}

TEST(ServeClient, ChunksThatCarryOutput) {
  const std::vector<std::pair<std::string, std::optional<bool>>> cases = {
      {R"({"id":"x","choices":[{"index":0,"text":"hi","logprobs":null,"finish_reason":null}],"usage":null})", true},
      {R"({"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null}]})", false},
      {R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})", true},
      {R"({"choices":[{"text":"","finish_reason":false}]})", true},
      {R"({"choices":[{"text":"","finish_reason":{}}]})", true},
      {R"({"choices":[{"text":[1]}]})", true},
      {R"({"choices":[{"text":[]}]})", false},
      {R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", false},
      {R"({"choices":[{"delta":{"content":"a"}}]})", true},
      {R"({"choices":[{"delta":{"reasoning_content":"a"}}]})", true},
      {R"({"choices":[{"delta":{"tool_calls":[{"index":0}]}}]})", true},
      {R"({"choices":[{"delta":{"tool_calls":[]}}]})", false},
      {R"({"choices":[{"delta":"content"}]})", false},
      {R"({"choices":[{"delta":{"x":{"content":"a"}}}]})", false},
      {R"({"choices":[{"index":0},{"text":"b"}]})", true},
      {R"({"choices":["text", 1, null]})", false},
      {R"({"choices":{"0":{"text":"a"}}})", false},
      {R"({"text":"a","delta":{"content":"a"},"x":{"choices":[{"text":"a"}]}})", false},
      {R"({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}})", false},
      {R"({"choices":[{"text":"a"}],"usage":{"prompt_tokens":1}})", true},
      {R"({"error":{"message":"m"},"choices":[{"text":"a"}]})", true},
      {R"([{"choices":[{"text":"a"}]}])", std::nullopt},
      {R"("text")", std::nullopt},
      {R"({"choices":[{"text":"a"}]} x)", std::nullopt},
      {R"({"choices":[{"text":"a"})", std::nullopt},
  };
  for (const auto& [payload, want] : cases) EXPECT_EQ(bench::chunk_carries_output(payload), want) << payload;
}

TEST(ServeUrl, Parses) {
  const ServerUrl a = parse_server_url("http://127.0.0.1:8000");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, "8000");
  EXPECT_EQ(a.prefix, "");
  const ServerUrl b = parse_server_url("http://localhost/api/v1/");
  EXPECT_EQ(b.host, "localhost");
  EXPECT_EQ(b.port, "80");
  EXPECT_EQ(b.prefix, "/api");
  EXPECT_EQ(parse_server_url("http://[::1]:9000").host, "::1");
  EXPECT_THROW(parse_server_url("https://example.com"), Error);
  EXPECT_THROW(parse_server_url("http://host:port"), Error);
}

// ---------------------------------------------------------------------------------------------------------------
// Against a live server

class BenchServe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_tokenizer()) return;
    tokenizer_ = new text::Tokenizer(text::Tokenizer::load(test::served_model_dir()));
    model_ = new model::v4::Model(model::v4::load_model(test::served_model_dir()));
    engine::EngineConfig ec;
    ec.max_model_len = 512;
    ec.scheduler.max_num_seqs = 8;
    ec.pool.max_sequences = 8;
    ec.pool.blocks = 32;
    server::ServerConfig sc;
    sc.port = 0;
    sc.served_model_name = "bench-model";
    server_ = new server::Server(*model_, *tokenizer_, ec, sc);
    server_->start();
    sc.api_keys = {"secret"};
    locked_ = new server::Server(*model_, *tokenizer_, ec, sc);
    locked_->start();
  }
  static void TearDownTestSuite() {
    delete locked_;
    delete server_;
    delete model_;
    delete tokenizer_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "needs the DeepSeek tokenizer in " << test::tokenizer_v3_dir() << " (scripts/setup.sh)";
  }
  static std::string url(const server::Server* s) { return "http://127.0.0.1:" + std::to_string(s->port()); }
  static WorkloadConfig workload(int64_t n, int64_t input_len, int64_t output_len) {
    WorkloadConfig w;
    w.num_prompts = n;
    w.input_len = input_len;
    w.output_len = output_len;
    return w;
  }

  static text::Tokenizer* tokenizer_;
  static model::v4::Model* model_;
  static server::Server* server_;
  static server::Server* locked_;
};
text::Tokenizer* BenchServe::tokenizer_ = nullptr;
model::v4::Model* BenchServe::model_ = nullptr;
server::Server* BenchServe::server_ = nullptr;
server::Server* BenchServe::locked_ = nullptr;

TEST_F(BenchServe, StreamsCompletionsAtAConcurrency) {
  LoadConfig c;
  c.url = url(server_);
  c.model = first_served_model(c.url, "");
  EXPECT_EQ(c.model, "bench-model");
  c.concurrency = 3;
  const LoadResult r = run_load(c, make_workload(workload(7, 8, 6)));
  ASSERT_EQ(r.requests.size(), 7u);
  EXPECT_EQ(r.max_in_flight, 3);
  EXPECT_EQ(r.connections, 3);  // kept alive: each slot's connection serves its next request
  double last_e2e_end = 0;
  for (const RequestRecord& q : r.requests) {
    EXPECT_TRUE(q.ok) << q.error;
    EXPECT_EQ(q.prompt_tokens, 8);
    EXPECT_EQ(q.output_tokens, 6);
    EXPECT_GE(q.chunks, 2);  // at least a text chunk and the finish
    EXPECT_LE(q.chunks, 6);
    EXPECT_EQ(q.itl_s.size(), static_cast<size_t>(q.chunks - 1));
    EXPECT_GT(q.ttft_s, 0);
    EXPECT_GE(q.e2e_s, q.ttft_s);
    last_e2e_end = std::max(last_e2e_end, q.send_s + q.e2e_s);
  }
  EXPECT_NEAR(r.duration_s, last_e2e_end, 0.05);
  const ServeReport report = summarize(r, {});
  EXPECT_EQ(report.completed, 7);
  EXPECT_EQ(report.output_tokens, 42);
  EXPECT_GT(report.output_throughput, 0);
  EXPECT_LE(report.ttft_ms.median, report.ttft_ms.p99);
}

TEST_F(BenchServe, PoissonArrivalsAndChat) {
  LoadConfig c;
  c.url = url(server_);
  c.model = "bench-model";
  c.chat = true;
  c.concurrency = 8;
  c.request_rate = 20;
  c.seed = 9;
  WorkloadConfig w = workload(6, 5, 4);
  w.chat = true;
  w.dataset = "shared-prefix";
  w.prefix_len = 6;
  const LoadResult r = run_load(c, make_workload(w));
  double previous = -1;
  for (const RequestRecord& q : r.requests) {
    EXPECT_TRUE(q.ok) << q.error;
    EXPECT_EQ(q.output_tokens, 4);
    EXPECT_GT(q.prompt_tokens, 11);  // the chat template adds tokens around the words
    EXPECT_GE(q.send_s, previous);   // released in order, at increasing times
    previous = q.send_s;
  }
  EXPECT_GT(r.requests.back().send_s, 0.0);  // the last arrival is not at time 0
}

TEST_F(BenchServe, FailuresAreRecordedNotFatal) {
  LoadConfig c;
  c.url = url(locked_);  // no API key given
  c.model = "bench-model";
  c.concurrency = 2;
  const LoadResult r = run_load(c, make_workload(workload(3, 4, 2)));
  for (const RequestRecord& q : r.requests) {
    EXPECT_FALSE(q.ok);
    EXPECT_EQ(q.error.rfind("HTTP 401: ", 0), 0u) << q.error;
    EXPECT_NE(q.error.find("invalid_api_key"), std::string::npos) << q.error;
  }
  c.api_key = "secret";
  for (const RequestRecord& q : run_load(c, make_workload(workload(2, 4, 2))).requests) EXPECT_TRUE(q.ok) << q.error;
  EXPECT_THROW(first_served_model(url(locked_), ""), Error);

  c.url = url(server_);
  c.model = "no-such-model";
  const RequestRecord q = run_load(c, make_workload(workload(1, 4, 2))).requests[0];
  EXPECT_EQ(q.error.rfind("HTTP 404: ", 0), 0u) << q.error;
  EXPECT_EQ(summarize(run_load(c, make_workload(workload(2, 4, 2))), {}).failed, 2);
}

TEST_F(BenchServe, CommandWritesJson) {
  const std::string dir = test::temp_dir("bench_serve_cli");
  const std::string out = dir + "/serve.json";
  std::string cmd = std::string("'") + STRATA_BINARY + "' bench serve --url " + url(server_) +
                    " --concurrency 2 --num-prompts 4 --input-len 6 --output-len 3 --slo-ttft-ms 60000" +
                    " --commit 0123abc --label tiny-test --out '" + out + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  EXPECT_NE(text.find("Output token throughput (tok/s):"), std::string::npos) << text;
  std::ifstream in(out);
  const json j = json::parse(in);
  EXPECT_EQ(j["benchmark"], "serve");
  EXPECT_EQ(j["commit"], "0123abc");
  EXPECT_TRUE(j["device"]["cpu"].is_string());
  EXPECT_TRUE(j["device"]["gpus"].is_array());
  EXPECT_EQ(j["date"].get<std::string>().size(), 20u);  // 2026-11-29T10:37:54Z
  EXPECT_EQ(j["config"]["model"], "bench-model");
  EXPECT_EQ(j["config"]["label"], "tiny-test");
  EXPECT_EQ(j["config"]["concurrency"], 2);
  EXPECT_EQ(j["config"]["request_rate"], "inf");
  EXPECT_EQ(j["results"]["completed"], 4);
  EXPECT_EQ(j["results"]["output_tokens"], 12);
  EXPECT_EQ(j["results"]["good_requests"], 4);
  EXPECT_GT(j["results"]["ttft_ms"]["p99"].get<double>(), 0);
  EXPECT_EQ(j.dump().find("127.0.0.1"), std::string::npos);  // no host names in results files
  // The latency CDFs beside the JSON, drawn by gnuplot (scripts/setup.sh installs it; without it, a warning).
  if (text.find("gnuplot is not installed") == std::string::npos) {
    std::ifstream png(dir + "/serve_latency.png", std::ios::binary);
    char magic[4] = {};
    png.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << text;
    EXPECT_NE(text.find("plot: " + dir + "/serve_latency.png"), std::string::npos) << text;
  }

  // A server that is not there: every request fails, exit code 1.
  const std::string refused = std::string("'") + STRATA_BINARY +
                              "' bench serve --url http://127.0.0.1:1 --model m --num-prompts 2 --output-len 2 2>&1";
  FILE* q = ::popen(refused.c_str(), "r");
  text.clear();
  while ((n = std::fread(buf, 1, sizeof buf, q)) > 0) text.append(buf, n);
  const int refused_status = ::pclose(q);
  EXPECT_TRUE(WIFEXITED(refused_status) && WEXITSTATUS(refused_status) == 1) << text;
  EXPECT_NE(text.find("error: connect: "), std::string::npos) << text;
}

}  // namespace
}  // namespace strata::bench
