// Request parsing: every accepted field maps to the right parameter; every bad one is a 400 naming it.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace strata::server {
namespace {

using nlohmann::json;

const json kMessages = json::array({{{"role", "user"}, {"content", "Hi"}}});

json chat(json extra = json::object()) {
  json body = {{"model", "m"}, {"messages", kMessages}};
  body.update(extra);
  return body;
}

json completion(json extra = json::object()) {
  json body = {{"prompt", "Once"}};
  body.update(extra);
  return body;
}

CompletionRequest parse(Endpoint e, const json& body, ProtocolLimits limits = {}) {
  limits.vocab_size = 1000;
  return parse_completion_request(e, body.dump(), limits);
}

// The error a body gets: its status, param and message.
struct Rejection {
  int status = 0;
  std::string param, message;
};
Rejection reject(Endpoint e, const std::string& body, ProtocolLimits limits = {}) {
  limits.vocab_size = 1000;
  try {
    parse_completion_request(e, body, limits);
  } catch (const RequestError& err) {
    return {err.status(), err.param(), err.what()};
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

TEST(OpenaiProtocol, ChatFieldsMapToSamplingParams) {
  const CompletionRequest r = parse(Endpoint::kChatCompletions,
                                    chat({{"temperature", 0.5},
                                          {"top_p", 0.9},
                                          {"top_k", 40},
                                          {"min_p", 0.05},
                                          {"presence_penalty", 0.5},
                                          {"frequency_penalty", -0.5},
                                          {"repetition_penalty", 1.1},
                                          {"seed", 7},
                                          {"stop", {"END", "\n\n"}},
                                          {"stop_token_ids", {5, 6}},
                                          {"max_tokens", 32},
                                          {"n", 3},
                                          {"ignore_eos", true},
                                          {"logprobs", true},
                                          {"top_logprobs", 4},
                                          {"stream", true},
                                          {"stream_options", {{"include_usage", true}}},
                                          {"user", "u1"}}));
  EXPECT_EQ(r.model, "m");
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 0.5);
  EXPECT_DOUBLE_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_DOUBLE_EQ(r.sampling.min_p, 0.05);
  EXPECT_DOUBLE_EQ(r.sampling.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r.sampling.frequency_penalty, -0.5);
  EXPECT_DOUBLE_EQ(r.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"END", "\n\n"}));
  EXPECT_EQ(r.sampling.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(r.sampling.max_tokens, 32);
  EXPECT_TRUE(r.max_tokens_given);
  EXPECT_EQ(r.sampling.n, 3);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.sampling.logprobs, 4);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.chat["messages"][0]["content"], "Hi");
}

TEST(OpenaiProtocol, DefaultsAndNulls) {
  const CompletionRequest r = parse(Endpoint::kChatCompletions,
                                    chat({{"temperature", nullptr}, {"stop", nullptr}, {"max_tokens", nullptr},
                                          {"seed", nullptr}, {"logit_bias", nullptr}}));
  EXPECT_DOUBLE_EQ(r.sampling.temperature, 1.0);
  EXPECT_TRUE(r.sampling.stop.empty());
  EXPECT_FALSE(r.max_tokens_given);
  EXPECT_FALSE(r.sampling.seed);
  EXPECT_FALSE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.skip_special_tokens);
}

TEST(OpenaiProtocol, MaxCompletionTokensWinsAndIsNamed) {
  const CompletionRequest r =
      parse(Endpoint::kChatCompletions, chat({{"max_tokens", 5}, {"max_completion_tokens", 9}}));
  EXPECT_EQ(r.sampling.max_tokens, 9);
  EXPECT_EQ(r.max_tokens_param, "max_completion_tokens");
  const Rejection bad = reject(Endpoint::kChatCompletions, chat({{"max_completion_tokens", -1}}).dump());
  EXPECT_EQ(bad.param, "max_completion_tokens");
}

TEST(OpenaiProtocol, VllmSpellings) {
  const CompletionRequest r = parse(Endpoint::kChatCompletions, chat({{"top_k", -1}, {"max_tokens", 16.0}}));
  EXPECT_EQ(r.sampling.top_k, 0);  // -1 = off
  EXPECT_EQ(r.sampling.max_tokens, 16);
}

TEST(OpenaiProtocol, CompletionPrompts) {
  EXPECT_EQ(std::get<std::string>(parse(Endpoint::kCompletions, completion()).prompts.at(0)), "Once");
  const CompletionRequest ids = parse(Endpoint::kCompletions, completion({{"prompt", {1, 2, 3}}}));
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids.prompts.at(0)), (std::vector<int32_t>{1, 2, 3}));
  const CompletionRequest batch =
      parse(Endpoint::kCompletions, completion({{"prompt", json::array({"a", json::array({4, 5})})}}));
  ASSERT_EQ(batch.prompts.size(), 2u);
  EXPECT_EQ(std::get<std::string>(batch.prompts[0]), "a");
  EXPECT_EQ(std::get<std::vector<int32_t>>(batch.prompts[1]), (std::vector<int32_t>{4, 5}));
  const CompletionRequest lp = parse(Endpoint::kCompletions, completion({{"logprobs", 2}, {"echo", false}}));
  EXPECT_TRUE(lp.logprobs);
  EXPECT_EQ(lp.sampling.logprobs, 2);
}

TEST(OpenaiProtocol, EveryBadFieldIsNamed) {
  struct Case {
    Endpoint endpoint;
    json body;
    std::string param, message_part;
  };
  const Endpoint C = Endpoint::kChatCompletions, P = Endpoint::kCompletions;
  const std::vector<Case> cases = {
      {C, chat({{"top_p", 2}}), "top_p", "top_p: expected a number in (0, 1], found 2"},
      {C, chat({{"top_p", "high"}}), "top_p", "expected a number, found a string"},
      {C, chat({{"temperature", -1}}), "temperature", "temperature: expected a number ≥ 0"},
      {C, chat({{"top_k", -5}}), "top_k", "top_k:"},
      {C, chat({{"top_k", 1.5}}), "top_k", "expected an integer"},
      {C, chat({{"min_p", 2}}), "min_p", "min_p:"},
      {C, chat({{"presence_penalty", 3}}), "presence_penalty", "[-2, 2]"},
      {C, chat({{"frequency_penalty", -3}}), "frequency_penalty", "[-2, 2]"},
      {C, chat({{"repetition_penalty", 0}}), "repetition_penalty", "> 0"},
      {C, chat({{"seed", "x"}}), "seed", "expected an integer"},
      {C, chat({{"stop", 5}}), "stop", "expected a string or an array of strings"},
      {C, chat({{"stop", {"a", 1}}}), "stop[1]", "expected a string"},
      {C, chat({{"stop", {""}}}), "stop", "must not be empty"},
      {C, chat({{"stop_token_ids", {1, -2}}}), "stop_token_ids[1]", "token id"},
      {C, chat({{"stop_token_ids", {5000}}}), "stop_token_ids", "outside the vocabulary"},
      {C, chat({{"max_tokens", -1}}), "max_tokens", "≥ 0"},
      {C, chat({{"max_tokens", "10"}}), "max_tokens", "expected an integer"},
      {C, chat({{"n", 0}}), "n", "≥ 1"},
      {C, chat({{"n", 17}}), "n", "at most 16"},
      {C, chat({{"ignore_eos", 1}}), "ignore_eos", "expected true or false"},
      {C, chat({{"stream", "yes"}}), "stream", "expected true or false"},
      {C, chat({{"stream_options", {{"include_usage", true}}}}), "stream_options", "only allowed when stream is true"},
      {C, chat({{"stream", true}, {"stream_options", {{"bogus", true}}}}), "stream_options.bogus", "unknown"},
      {C, chat({{"logprobs", 1}}), "logprobs", "expected true or false"},
      {C, chat({{"top_logprobs", 2}}), "top_logprobs", "requires logprobs"},
      {C, chat({{"logprobs", true}, {"top_logprobs", 21}}), "top_logprobs", "[0, 20]"},
      {C, chat({{"model", 3}}), "model", "expected a string"},
      {C, chat({{"frobnicate", true}}), "frobnicate", "unknown parameter"},
      {C, chat({{"prompt", "x"}}), "prompt", "use messages"},
      {C, chat({{"logit_bias", {5, 10}}}), "logit_bias", "expected an object mapping token ids"},
      {C, chat({{"logit_bias", {{"five", 10}}}}), "logit_bias", "key 'five' is not a token id"},
      {C, chat({{"logit_bias", {{"-5", 10}}}}), "logit_bias", "key '-5' is not a token id"},
      {C, chat({{"logit_bias", {{"99999999999", 10}}}}), "logit_bias", "not a token id"},
      {C, chat({{"logit_bias", {{"5", "10"}}}}), "logit_bias", "the bias of token 5 must be a number in [-100, 100], found a string"},
      {C, chat({{"logit_bias", {{"5", 100.5}}}}), "logit_bias", "must be a number in [-100, 100], found 100.5"},
      {C, chat({{"logit_bias", {{"1000", 1}}}}), "logit_bias", "token id 1000 is outside the vocabulary [0, 1000)"},
      {C, chat({{"metadata", "x"}}), "metadata", "expected an object"},
      {C, chat({{"metadata", {{"k", 1}}}}), "metadata", "must be a string"},
      {C, chat({{"store", "yes"}}), "store", "expected true or false"},
      {C, chat({{"service_tier", "gold"}}), "service_tier", "expected one of auto"},
      {C, chat({{"prompt_cache_key", 7}}), "prompt_cache_key", "expected a string"},
      {C, chat({{"parallel_tool_calls", "no"}}), "parallel_tool_calls", "expected true or false"},
      {C, chat({{"functions", json::array()}}), "functions", "use tools"},
      {C, chat({{"best_of", 3}}), "best_of", "best_of equal to n"},
      {C, json{{"model", "m"}}, "messages", "messages: missing"},
      {C, chat({{"messages", json::array()}}), "messages", "messages: empty"},
      {C, chat({{"messages", {{{"role", "robot"}, {"content", "x"}}}}}), "messages[0].role", "messages[0].role"},
      {C, chat({{"tool_choice", "sometimes"}}), "tool_choice", "tool_choice"},
      {C, chat({{"response_format", {{"type", "yaml"}}}}), "response_format.type", "response_format.type"},
      {C, chat({{"reasoning_effort", "extreme"}}), "reasoning_effort", "reasoning_effort"},
      {P, completion({{"prompt", 5}}), "prompt", "expected a string"},
      {P, completion({{"prompt", json::array()}}), "prompt", "empty array"},
      {P, completion({{"prompt", {1, "a"}}}), "prompt[1]", "expected an integer"},
      {P, completion({{"prompt", {"a", 7}}}), "prompt[1]", "expected a string or a non-empty array"},
      {P, json{{"max_tokens", 3}}, "prompt", "prompt: missing"},
      {P, completion({{"messages", kMessages}}), "messages", "use prompt"},
      {P, completion({{"logprobs", true}}), "logprobs", "expected an integer"},
      {P, completion({{"logprobs", 21}}), "logprobs", "[0, 20]"},
      {P, completion({{"echo", true}, {"logprobs", 1}}), "echo", "not supported"},
      {P, completion({{"suffix", "end"}}), "suffix", "not supported"},
      {P, completion({{"top_logprobs", 2}}), "top_logprobs", "unknown parameter"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.dump());
    const Rejection r = reject(c.endpoint, c.body.dump());
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.param, c.param);
    EXPECT_NE(r.message.find(c.message_part), std::string::npos) << r.message;
  }
}

// logit_bias becomes the engine's bias list (sorted by id, a float each); the fields real clients send that the
// server has no use for are accepted (README.md, "Serving").
TEST(OpenaiProtocol, LogitBiasAndTheFieldsClientsSend) {
  const CompletionRequest r =
      parse(Endpoint::kChatCompletions, chat({{"logit_bias", {{"42", -100}, {"7", 2.5}, {"999", 100}}}}));
  EXPECT_EQ(r.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {42, -100.0f}, {999, 100.0f}}));
  EXPECT_TRUE(parse(Endpoint::kCompletions, completion({{"logit_bias", json::object()}})).sampling.logit_bias.empty());
  EXPECT_EQ(parse(Endpoint::kCompletions, completion({{"logit_bias", {{"3", 1}}}})).sampling.logit_bias.size(), 1u);
  const json metadata = {{"team", "a"}, {"run", "7"}};
  for (const Endpoint e : {Endpoint::kChatCompletions, Endpoint::kCompletions}) {
    const json extra = {{"user", "u-1"}, {"metadata", metadata}, {"store", true}, {"service_tier", "auto"},
                        {"prompt_cache_key", "session-9"}};
    json body = e == Endpoint::kChatCompletions ? chat(extra) : completion(extra);
    EXPECT_NO_THROW(parse(e, body)) << body.dump();
  }
  EXPECT_TRUE(parse(Endpoint::kChatCompletions, chat()).parallel_tool_calls);
  EXPECT_FALSE(parse(Endpoint::kChatCompletions, chat({{"parallel_tool_calls", false}})).parallel_tool_calls);
  json many = json::object();
  for (int i = 0; i < 17; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_EQ(reject(Endpoint::kChatCompletions, chat({{"metadata", many}}).dump()).param, "metadata");
}

TEST(OpenaiProtocol, MalformedBodies) {
  for (const std::string& body : {std::string("{"), std::string("[1, 2]"), std::string("nul"), std::string("")}) {
    const Rejection r = reject(Endpoint::kChatCompletions, body);
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.param, "");
  }
}

TEST(OpenaiProtocol, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = "{\"messages\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  const Rejection r = reject(Endpoint::kChatCompletions, deep);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.message.find("deeper than 64"), std::string::npos);
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse(Endpoint::kChatCompletions,
                        chat({{"messages", json::array({{{"role", "user"}, {"content", std::string(500, '[')}}})}})));
}

TEST(OpenaiProtocol, LimitsComeFromTheServer) {
  ProtocolLimits limits;
  limits.max_n = 2;
  limits.max_stop_strings = 1;
  EXPECT_EQ(reject(Endpoint::kChatCompletions, chat({{"n", 3}}).dump(), limits).param, "n");
  EXPECT_EQ(reject(Endpoint::kChatCompletions, chat({{"stop", {"a", "b"}}}).dump(), limits).param, "stop");
}

TEST(OpenaiProtocol, ErrorBodyIsOpenAiShaped) {
  const RequestError e(400, "top_p", "top_p: expected a number in (0, 1], found 2");
  EXPECT_EQ(error_body(e),
            R"({"error":{"message":"top_p: expected a number in (0, 1], found 2","type":"invalid_request_error",)"
            R"("param":"top_p","code":null}})");
  EXPECT_EQ(json::parse(error_body("no", "server_error", "", "x"))["error"]["param"], nullptr);
}

TEST(OpenaiProtocol, LowerLayerErrorsNameTheirField) {
  EXPECT_EQ(as_request_error(Error("messages[2].content: expected a string")).param(), "messages[2].content");
  EXPECT_EQ(as_request_error(Error("prompt: 9 tokens plus max_tokens 9 exceed max_model_len 10"), "messages").param(),
            "messages");
  EXPECT_EQ(as_request_error(Error("the server is shutting down")).param(), "");
}

TEST(OpenaiProtocol, ResponseIds) {
  const std::string a = new_response_id(Endpoint::kChatCompletions), b = new_response_id(Endpoint::kChatCompletions);
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), std::string("chatcmpl-").size() + 24);
  EXPECT_NE(a, b);
  EXPECT_EQ(new_response_id(Endpoint::kCompletions).rfind("cmpl-", 0), 0u);
}

}  // namespace
}  // namespace strata::server

namespace strata::server {
namespace {

using text::grammar::SourceKind;

// Structured outputs: structured_outputs (both endpoints) and response_format (chat) become the request's grammar,
// named by the field it came from; the shape of each is checked here, its content by the grammar cache.
TEST(OpenaiProtocol, StructuredOutputsAndResponseFormatBecomeTheGrammar) {
  CompletionRequest r = parse(Endpoint::kCompletions, completion({{"structured_outputs", {{"regex", "[a-z]+"}}}}));
  ASSERT_TRUE(r.grammar);
  EXPECT_EQ(r.grammar->kind, SourceKind::kRegex);
  EXPECT_EQ(r.grammar->source, "[a-z]+");
  EXPECT_EQ(r.grammar->param, "structured_outputs.regex");
  r = parse(Endpoint::kChatCompletions, chat({{"structured_outputs", {{"json", {{"type", "integer"}}}}}}));
  EXPECT_EQ(r.grammar->kind, SourceKind::kJsonSchema);
  EXPECT_EQ(json::parse(r.grammar->source), json({{"type", "integer"}}));
  r = parse(Endpoint::kChatCompletions, chat({{"structured_outputs", {{"json", "{\"type\": \"string\"}"}}}}));
  EXPECT_EQ(r.grammar->source, "{\"type\": \"string\"}") << "a schema given as JSON text";
  r = parse(Endpoint::kChatCompletions, chat({{"structured_outputs", {{"choice", {"a", "b"}}, {"regex", nullptr}}}}));
  EXPECT_EQ(r.grammar->kind, SourceKind::kChoice);
  r = parse(Endpoint::kChatCompletions, chat({{"structured_outputs", {{"grammar", "root ::= \"x\""}}}}));
  EXPECT_EQ(r.grammar->kind, SourceKind::kEbnf);
  r = parse(Endpoint::kChatCompletions, chat({{"response_format", {{"type", "json_object"}}}}));
  EXPECT_EQ(r.grammar->kind, SourceKind::kJsonObject);
  r = parse(Endpoint::kChatCompletions,
            chat({{"response_format",
                   {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"strict", false}, {"schema", {{"type", "object"}}}}}}}}));
  EXPECT_EQ(r.grammar->kind, SourceKind::kJsonSchema);
  EXPECT_EQ(r.grammar->param, "response_format.json_schema.schema");
  EXPECT_FALSE(parse(Endpoint::kChatCompletions, chat({{"response_format", {{"type", "text"}}}})).grammar);
  EXPECT_FALSE(parse(Endpoint::kChatCompletions, chat()).grammar);
}

TEST(OpenaiProtocol, BadStructuredOutputsNameTheField) {
  struct Case {
    json extra;
    std::string param, words;
  };
  const std::vector<Case> cases = {
      {{{"structured_outputs", "x"}}, "structured_outputs", "expected an object"},
      {{{"structured_outputs", json::object()}}, "structured_outputs", "expected one of"},
      {{{"structured_outputs", {{"regex", "a"}, {"grammar", "b"}}}}, "structured_outputs", "give one of"},
      {{{"structured_outputs", {{"regex", 3}}}}, "structured_outputs.regex", "expected a string"},
      {{{"structured_outputs", {{"json", 3}}}}, "structured_outputs.json", "JSON Schema"},
      {{{"structured_outputs", {{"choice", json::array()}}}}, "structured_outputs.choice", "non-empty"},
      {{{"structured_outputs", {{"choice", {"a", 1}}}}}, "structured_outputs.choice[1]", "expected a string"},
      {{{"structured_outputs", {{"structural_tag", "x"}}}}, "structured_outputs.structural_tag", "unknown parameter"},
      {{{"structured_outputs", {{"regex", "a"}}}, {"response_format", {{"type", "json_object"}}}}, "response_format",
       "not both"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}, {"strict", "yes"}}}}}},
       "response_format.json_schema.strict", "true or false"},
  };
  for (const Case& c : cases) {
    const Rejection r = reject(Endpoint::kChatCompletions, chat(c.extra).dump());
    EXPECT_EQ(r.status, 400) << c.extra.dump();
    EXPECT_EQ(r.param, c.param) << c.extra.dump() << ": " << r.message;
    EXPECT_NE(r.message.find(c.words), std::string::npos) << r.message;
  }
}

}  // namespace
}  // namespace strata::server
