// CompletionStream without HTTP: engine events in, SSE frames and response bodies out (with the DeepSeek tokenizer).
#include "server/completion_stream.h"

#include <gtest/gtest.h>

#include <set>

#include "server/http_test_client.h"
#include "server/served_model.h"
#include "text/tokenizer.h"

namespace strata::server {
namespace {

using nlohmann::json;

class ServerStream : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::have_tokenizer()) return;
    const std::string dir = test::temp_dir("stream_tokenizer");
    text::write_test_tokenizer(test::tokenizer_v3_dir(), dir);
    tokenizer_ = new text::Tokenizer(text::Tokenizer::load(dir));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (!tokenizer_) GTEST_SKIP() << "needs the DeepSeek tokenizer (scripts/setup.sh)";
  }

  static CompletionRequest request(Endpoint endpoint, json extra) {
    json body = endpoint == Endpoint::kChatCompletions
                    ? json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}}
                    : json{{"prompt", "x"}};
    body.update(extra);
    return parse_completion_request(endpoint, body.dump(), {});
  }
  // Feeds `text` as the tokens it encodes to (one event each), then a finish event.
  static std::string feed(CompletionStream& s, size_t choice, const std::string& text, engine::FinishReason reason,
                          bool finish_with_token = false, int32_t last_token = 1, StreamUpdate* last = nullptr) {
    std::string sse;
    const std::vector<int32_t> ids = tokenizer_->encode(text, /*parse_special=*/true);
    for (int32_t id : ids) {
      engine::TokenEvent ev;
      ev.token = id;
      ev.logprob = -0.5f;
      const StreamUpdate u = s.on_event(choice, ev);
      sse += u.sse;
      if (last) *last = u;
      if (u.choice_finished) return sse;
    }
    engine::TokenEvent end;
    if (finish_with_token) end.token = last_token;
    end.finished = true;
    end.reason = reason;
    const StreamUpdate u = s.on_event(choice, end);
    if (last) *last = u;
    return sse + u.sse;
  }
  static std::vector<json> chunks_of(const std::string& sse) {
    std::vector<json> out;
    for (const std::string& p : test::sse_payloads(sse))
      if (p != "[DONE]") out.push_back(json::parse(p));
    return out;
  }

  static text::Tokenizer* tokenizer_;
};
text::Tokenizer* ServerStream::tokenizer_ = nullptr;

TEST(ServerSse, Framing) {
  EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  EXPECT_EQ(test::sse_payloads(sse_event("x") + std::string(kSseDone)), (std::vector<std::string>{"x", "[DONE]"}));
}

TEST_F(ServerStream, ChatChunks) {
  CompletionStream s(request(Endpoint::kChatCompletions, {{"stream", true}, {"stream_options", {{"include_usage", true}}}}),
                     *tokenizer_, "chatcmpl-abc", 123, "m", {7});
  std::string sse = s.begin_sse();
  sse += feed(s, 0, "Hello, world! 你好", engine::FinishReason::Stop, /*finish_with_token=*/true);
  ASSERT_TRUE(s.done());
  sse += s.end_sse();
  EXPECT_EQ(sse.substr(sse.size() - kSseDone.size()), kSseDone);
  const std::vector<json> chunks = chunks_of(sse);
  ASSERT_GE(chunks.size(), 3u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  std::string content;
  for (const json& c : chunks) {
    EXPECT_EQ(c["id"], "chatcmpl-abc");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["created"], 123);
    EXPECT_EQ(c["model"], "m");
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
      content += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(content, "Hello, world! 你好");  // the stop token's text (EOS) is left out
  const json& finish = chunks[chunks.size() - 2];
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
  const json& usage = chunks.back();
  EXPECT_TRUE(usage["choices"].empty());
  const int64_t generated = static_cast<int64_t>(tokenizer_->encode("Hello, world! 你好", true).size()) + 1;
  EXPECT_EQ(usage["usage"], (json{{"prompt_tokens", 7},
                                     {"completion_tokens", generated},
                                     {"total_tokens", 7 + generated},
                                     {"prompt_tokens_details", {{"cached_tokens", 0}}},
                                     {"prompt_cache_hit_tokens", 0},
                                     {"prompt_cache_miss_tokens", 7}}));
}

TEST_F(ServerStream, StopStringEndsTheChoiceAndAsksForAnAbort) {
  CompletionStream s(request(Endpoint::kCompletions, {{"stop", {"world"}}}), *tokenizer_, "cmpl-x", 1, "m", {3});
  StreamUpdate last;
  feed(s, 0, "Hello, world and more", engine::FinishReason::Length, false, 1, &last);
  EXPECT_TRUE(last.choice_finished);
  EXPECT_TRUE(last.abort_sequence);
  EXPECT_TRUE(s.done());
  // The abort that follows changes nothing.
  engine::TokenEvent abort_event;
  abort_event.finished = true;
  abort_event.reason = engine::FinishReason::Abort;
  EXPECT_FALSE(s.on_event(0, abort_event).choice_finished);
  const json body = json::parse(s.response_body());
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "Hello, ");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][0]["logprobs"], nullptr);
}

TEST_F(ServerStream, ChatReasoningAndToolCalls) {
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
  const CompletionRequest r =
      request(Endpoint::kChatCompletions, {{"tools", tools}, {"chat_template_kwargs", {{"thinking", true}}}});
  CompletionStream s(r, *tokenizer_, "chatcmpl-t", 1, "m", {3});
  const std::string completion =
      "Let me check.</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  feed(s, 0, completion, engine::FinishReason::Stop, /*finish_with_token=*/true);
  const json body = json::parse(s.response_body());
  const json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Let me check.");
  EXPECT_EQ(message["content"], "Checking.");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()), (json{{"city", "Paris"}}));
  EXPECT_EQ(message["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
}

// parallel_tool_calls false: a reply that calls two tools returns the first only, whole and streamed.
TEST_F(ServerStream, ParallelToolCallsFalseKeepsTheFirstCall) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}},
                                  {{"type", "function"}, {"function", {{"name", "g"}}}}});
  const std::string two_calls =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">x"
      "</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"g\">\n<｜DSML｜parameter name=\"b\" "
      "string=\"true\">y</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  for (const bool parallel : {true, false}) {
    CompletionStream whole(request(Endpoint::kChatCompletions, {{"tools", tools}, {"parallel_tool_calls", parallel}}),
                           *tokenizer_, "chatcmpl-p", 1, "m", {3});
    feed(whole, 0, two_calls, engine::FinishReason::Stop, true);
    const json message = json::parse(whole.response_body())["choices"][0]["message"];
    ASSERT_EQ(message["tool_calls"].size(), parallel ? 2u : 1u) << message.dump();
    EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "f");
    CompletionStream streamed(
        request(Endpoint::kChatCompletions, {{"tools", tools}, {"parallel_tool_calls", parallel}, {"stream", true}}),
        *tokenizer_, "chatcmpl-q", 1, "m", {3});
    std::set<std::string> names;
    for (const json& c : chunks_of(feed(streamed, 0, two_calls, engine::FinishReason::Stop, true)))
      for (const json& call : c["choices"][0]["delta"].value("tool_calls", json::array()))
        if (call["function"].contains("name")) names.insert(call["function"]["name"].get<std::string>());
    EXPECT_EQ(names, (parallel ? std::set<std::string>{"f", "g"} : std::set<std::string>{"f"}));
  }
}

TEST_F(ServerStream, StreamedToolCallsRebuildTheSameCall) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  CompletionStream s(request(Endpoint::kChatCompletions, {{"tools", tools}, {"stream", true}}), *tokenizer_, "chatcmpl-s",
                     1, "m", {3});
  const std::string sse = feed(s, 0,
                               "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" "
                               "string=\"false\">[1, 2]</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
                               engine::FinishReason::Stop, true);
  std::string name, arguments, id;
  for (const json& c : chunks_of(sse))
    for (const json& call : c["choices"][0]["delta"].value("tool_calls", json::array())) {
      EXPECT_EQ(call["index"], 0);
      if (call.contains("id")) id = call["id"];
      if (call["function"].contains("name")) name = call["function"]["name"];
      arguments += call["function"]["arguments"].get<std::string>();
    }
  EXPECT_EQ(name, "f");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(json::parse(arguments), (json{{"a", {1, 2}}}));
}

TEST_F(ServerStream, CompletionLogprobColumns) {
  CompletionStream s(request(Endpoint::kCompletions, {{"logprobs", 1}, {"echo", false}}), *tokenizer_, "cmpl-l", 1, "m", {2});
  feed(s, 0, "ab cd", engine::FinishReason::Length);
  const json lp = json::parse(s.response_body())["choices"][0]["logprobs"];
  const size_t n = tokenizer_->encode("ab cd", true).size();
  EXPECT_EQ(lp["tokens"].size(), n);
  EXPECT_EQ(lp["token_logprobs"], json(std::vector<double>(n, -0.5)));
  EXPECT_EQ(lp["text_offset"][0], 0);
  std::string joined;
  for (const json& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, "ab cd");
}

// OpenAI's legacy completions list the sampled token among the top_logprobs alternatives (up to logprobs + 1 of
// them); logprobs 0 gives just the sampled token.
TEST_F(ServerStream, CompletionTopLogprobsIncludeTheSampledToken) {
  CompletionStream zero(request(Endpoint::kCompletions, {{"logprobs", 0}}), *tokenizer_, "cmpl-z", 1, "m", {2});
  feed(zero, 0, "ab cd", engine::FinishReason::Length);
  const json lp = json::parse(zero.response_body())["choices"][0]["logprobs"];
  ASSERT_FALSE(lp["tokens"].empty());
  for (size_t i = 0; i < lp["tokens"].size(); ++i)
    EXPECT_EQ(lp["top_logprobs"][i], (json{{lp["tokens"][i].get<std::string>(), -0.5}})) << i;

  CompletionStream one(request(Endpoint::kCompletions, {{"logprobs", 1}, {"stream", true}}), *tokenizer_, "cmpl-o", 1, "m", {2});
  const int32_t sampled = tokenizer_->encode("ab", false).at(0), other = tokenizer_->encode(" cd", false).at(0);
  engine::TokenEvent ev;
  ev.token = sampled;
  ev.logprob = -2.0f;
  ev.top_logprobs = {{other, -0.25f}};  // the sampled token is not the most likely one
  const json chunk = chunks_of(one.on_event(0, ev).sse).at(0);
  const json top = chunk["choices"][0]["logprobs"]["top_logprobs"][0];
  EXPECT_EQ(top, (json{{tokenizer_->decode({other}, false), -0.25}, {tokenizer_->decode({sampled}, false), -2.0}}));
  ev.top_logprobs = {{sampled, -2.0f}};  // listed already: not twice
  EXPECT_EQ(chunks_of(one.on_event(0, ev).sse).at(0)["choices"][0]["logprobs"]["top_logprobs"][0].size(), 1u);
}

TEST_F(ServerStream, NonStreamNChoices) {
  CompletionStream s(request(Endpoint::kChatCompletions, {{"n", 2}}), *tokenizer_, "chatcmpl-n", 1, "m", {4});
  EXPECT_EQ(s.num_choices(), 2u);
  EXPECT_EQ(s.begin_sse().empty(), false);  // harmless when not streaming: the server only sends it for streams
  feed(s, 1, "second", engine::FinishReason::Length);
  EXPECT_FALSE(s.done());
  feed(s, 0, "first", engine::FinishReason::Length);
  ASSERT_TRUE(s.done());
  const json body = json::parse(s.response_body());
  EXPECT_EQ(body["choices"][0]["message"]["content"], "first");
  EXPECT_EQ(body["choices"][1]["message"]["content"], "second");
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4);
}

// Text-only chunks are written without building JSON objects: they must still be nlohmann's compact serialisation,
// with the keys in the order the generic path writes them, and carry the text exactly.
TEST_F(ServerStream, TextChunksAreCanonicalJsonInTheGenericKeyOrder) {
  const std::string text = "a\"b\\c\n\td\x01 \xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd </s>";
  using ojson = nlohmann::ordered_json;
  const auto keys = [](const ojson& o) {
    std::vector<std::string> out;
    for (const auto& [k, v] : o.items()) out.push_back(k);
    return out;
  };
  for (const Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChatCompletions})
    for (const bool usage : {false, true}) {
      const json extra = usage ? json{{"stream", true}, {"stream_options", {{"include_usage", true}}}}
                               : json{{"stream", true}};
      CompletionStream s(request(endpoint, extra), *tokenizer_, "id-\"q\"", 7, "m\\x", {3});
      const std::string sse = feed(s, 0, text, engine::FinishReason::Length);
      std::string streamed;
      int finishes = 0;
      for (const std::string& p : test::sse_payloads(sse)) {
        const ojson chunk = ojson::parse(p);
        EXPECT_EQ(chunk.dump(-1, ' ', false, ojson::error_handler_t::replace), p);
        std::vector<std::string> want = {"id", "object", "created", "model", "choices"};
        if (usage) want.push_back("usage");
        EXPECT_EQ(keys(chunk), want);
        EXPECT_EQ(chunk["id"], "id-\"q\"");
        EXPECT_EQ(chunk["model"], "m\\x");
        const ojson& choice = chunk["choices"][0];
        if (endpoint == Endpoint::kChatCompletions) {
          EXPECT_EQ(keys(choice), (std::vector<std::string>{"index", "delta", "logprobs", "finish_reason"}));
          if (choice["delta"].contains("content")) streamed += choice["delta"]["content"].get<std::string>();
        } else {
          EXPECT_EQ(keys(choice), (std::vector<std::string>{"index", "text", "logprobs", "finish_reason"}));
          streamed += choice["text"].get<std::string>();
        }
        EXPECT_TRUE(choice["logprobs"].is_null());
        if (!choice["finish_reason"].is_null()) {
          ++finishes;
          EXPECT_EQ(choice["finish_reason"], "length");
        }
      }
      EXPECT_EQ(streamed, text);
      EXPECT_EQ(finishes, 1);
    }
}

}  // namespace
}  // namespace strata::server
