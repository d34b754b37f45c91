// Structured outputs and tool_choice through the whole server: the demo model (models/demo/, a trained V4 with the
// DeepSeek tokenizer) served in-process, driven over real sockets. Every constrained reply must hold by
// construction, at temperature 1 too; bad grammars are 400s that name the field and the position.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "model/deepseek_v4/model.h"
#include "server/http_test_client.h"
#include "server/served_server.h"
#include "server/server.h"
#include "text/tokenizer.h"

namespace strata::server {
namespace {

using nlohmann::json;
using test::HttpReply;
using test::HttpTestClient;
using test::http_request;

std::filesystem::path demo_dir() {
  return (std::filesystem::path(STRATA_FIXTURES) / ".." / ".." / "models" / "demo").lexically_normal();
}

const json kWeatherTool = {
    {"type", "function"},
    {"function",
     {{"name", "weather"},
      {"description", "The forecast for a city."},
      {"parameters",
       {{"type", "object"},
        {"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}},
        {"required", json::array({"city", "days"})}}}}}};

class StructuredOutputs : public test::ServedServer<StructuredOutputs> {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(demo_dir() / "config.json")) return;
    engine::EngineConfig e;
    e.max_model_len = 2048;
    e.scheduler.max_num_seqs = 8;
    e.scheduler.max_num_batched_tokens = 512;
    e.pool.max_sequences = 8;
    e.pool.blocks = 64;
    ServerConfig c;
    c.port = 0;
    c.served_model_name = "demo";
    start(demo_dir().string(), e, c);
  }
  void SetUp() override { skip_unless_started("models/demo/ is absent"); }
  static json post(const std::string& path, const json& body, int expected_status = 200) {
    return post_json(path, body, expected_status, {});
  }
  static json chat(json extra) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "What is 23 plus 45?"}}})},
                 {"max_tokens", 48},
                 {"temperature", 1.0}};
    body.update(extra);
    return post("/v1/chat/completions", body);
  }
};

// {"name": string, "age": integer ≥ 0 as written, "tags"?: [string]} and nothing else: the schema below.
void expect_person(const json& v, const std::string& text) {
  ASSERT_TRUE(v.is_object()) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
  for (const auto& [key, value] : v.items()) {
    EXPECT_TRUE(key == "name" || key == "age" || key == "tags") << "an undeclared key " << key << " in " << text;
    if (key == "tags") {
      ASSERT_TRUE(value.is_array()) << text;
      for (const json& t : value) EXPECT_TRUE(t.is_string()) << text;
    }
  }
}

TEST_F(StructuredOutputs, JsonSchemaAtTemperatureOneParsesAndValidates) {
  const json schema = {{"type", "object"},
                       {"properties",
                        {{"name", {{"type", "string"}, {"maxLength", 12}}},
                         {"age", {{"type", "integer"}}},
                         {"tags", {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 2}}}}},
                       {"required", json::array({"name", "age"})}};
  // Four choices (seeds 1-4) decoded together. The grammar lets JSON whitespace run on, which this model sometimes
  // does at temperature 1: a choice cut by max_tokens is the one way an output may stay open, and at least one closes.
  const json reply = chat({{"seed", 1},
                           {"n", 4},
                           {"max_tokens", 150},
                           {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", schema}, {"strict", true}}}}}});
  int closed = 0;
  for (const json& choice : reply["choices"]) {
    const std::string text = choice["message"]["content"];
    if (choice["finish_reason"] == "length") continue;
    EXPECT_EQ(choice["finish_reason"], "stop") << text;
    json parsed;
    ASSERT_NO_THROW(parsed = json::parse(text)) << text;
    expect_person(parsed, text);
    ++closed;
  }
  EXPECT_GE(closed, 1) << reply.dump();
}

TEST_F(StructuredOutputs, JsonObjectAndStructuredJson) {
  const json a = chat({{"seed", 7}, {"max_tokens", 400}, {"response_format", {{"type", "json_object"}}}});
  if (a["choices"][0]["finish_reason"] == "stop") {
    const std::string text = a["choices"][0]["message"]["content"];
    json parsed;
    ASSERT_NO_THROW(parsed = json::parse(text)) << text;
    EXPECT_TRUE(parsed.is_object()) << text;
  }
  const json b = chat({{"seed", 8}, {"structured_outputs", {{"json", {{"type", "boolean"}}}}}});
  const std::string text = b["choices"][0]["message"]["content"];
  EXPECT_TRUE(text == "true" || text == "false") << text;
}

TEST_F(StructuredOutputs, RegexAndChoiceConstrainBothEndpoints) {
  const std::regex date("[0-9]{4}-[0-9]{2}-[0-9]{2}");
  for (uint64_t seed : {1, 2}) {
    const json r = post("/v1/completions", {{"prompt", "The date is"},
                                             {"max_tokens", 20},
                                             {"temperature", 1.0},
                                             {"seed", seed},
                                             {"structured_outputs", {{"regex", "[0-9]{4}-[0-9]{2}-[0-9]{2}"}}}});
    const std::string text = r["choices"][0]["text"];
    EXPECT_TRUE(std::regex_match(text, date)) << text;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  }
  const json c = chat({{"seed", 4}, {"structured_outputs", {{"choice", json::array({"yes", "no", "maybe so"})}}}});
  const std::string text = c["choices"][0]["message"]["content"];
  EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe so") << text;
}

TEST_F(StructuredOutputs, ThinkingModeConstrainsTheAnswerAfterTheReasoning) {
  const json r = chat({{"seed", 5},
                       {"max_tokens", 200},
                       {"chat_template_kwargs", {{"thinking", true}}},
                       {"structured_outputs", {{"choice", json::array({"68", "sixty-eight"})}}}});
  const json& m = r["choices"][0]["message"];
  ASSERT_EQ(r["choices"][0]["finish_reason"], "stop") << m.dump();
  EXPECT_FALSE(m["reasoning_content"].get<std::string>().empty()) << "the reasoning is free text: " << m.dump();
  EXPECT_TRUE(m["content"] == "68" || m["content"] == "sixty-eight") << m.dump();
}

TEST_F(StructuredOutputs, ToolChoiceNoneRequiredAndNamed) {
  const json calc = {{"type", "function"},
                     {"function",
                      {{"name", "calculator"},
                       {"parameters",
                        {{"type", "object"},
                         {"properties", {{"expression", {{"type", "string"}}}}},
                         {"required", json::array({"expression"})}}}}}};
  const json tools = json::array({calc, kWeatherTool});
  // none: the model was trained to call the calculator here, but no DSML may come out.
  // (Two choices each, seeds s and s + 1, decoded together.)
  const json none = chat({{"seed", 1}, {"n", 2}, {"tools", tools}, {"tool_choice", "none"}});
  for (const json& choice : none["choices"]) {
    const json& m = choice["message"];
    EXPECT_FALSE(m.contains("tool_calls") && !m["tool_calls"].empty()) << m.dump();
    EXPECT_EQ(m["content"].get<std::string>().find("DSML"), std::string::npos) << m.dump();
  }
  // required: one call to a declared tool, with arguments that follow its schema.
  const json required = chat({{"seed", 3}, {"n", 2}, {"max_tokens", 120}, {"tools", tools}, {"tool_choice", "required"},
                              {"parallel_tool_calls", false}});
  for (const json& choice : required["choices"]) {
    const json& m = choice["message"];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << m.dump();
    ASSERT_EQ(m["tool_calls"].size(), 1u) << m.dump();
    const std::string name = m["tool_calls"][0]["function"]["name"];
    const json args = json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>());
    if (name == "calculator") EXPECT_TRUE(args["expression"].is_string()) << m.dump();
    else if (name == "weather") EXPECT_TRUE(args["city"].is_string() && args["days"].is_number_integer()) << m.dump();
    else ADD_FAILURE() << "a call to an undeclared tool: " << m.dump();
  }
  // named: the weather function, which this question would never call on its own.
  const json r = chat({{"seed", 9},
                       {"max_tokens", 120},
                       {"tools", tools},
                       {"tool_choice", {{"type", "function"}, {"function", {{"name", "weather"}}}}}});
  const json& m = r["choices"][0]["message"];
  ASSERT_EQ(r["choices"][0]["finish_reason"], "tool_calls") << m.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "weather");
  const json args = json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["city"].is_string()) << m.dump();
  EXPECT_TRUE(args["days"].is_number_integer()) << m.dump();
}

TEST_F(StructuredOutputs, BadGrammarsAre400sWithThePosition) {
  auto error_of = [](const json& extra, const std::string& path = "/v1/chat/completions") {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"max_tokens", 4}};
    if (path == "/v1/completions") body = {{"prompt", "hi"}, {"max_tokens", 4}};
    body.update(extra);
    return post(path, body, 400)["error"];
  };
  json e = error_of({{"structured_outputs", {{"regex", "ab(c"}}}});
  EXPECT_EQ(e["param"], "structured_outputs.regex");
  EXPECT_NE(e["message"].get<std::string>().find("column 3"), std::string::npos) << e.dump();
  e = error_of({{"structured_outputs", {{"grammar", "root ::= \"a\"\nb ::= [z-a]"}}}}, "/v1/completions");
  EXPECT_EQ(e["param"], "structured_outputs.grammar");
  EXPECT_NE(e["message"].get<std::string>().find("2:"), std::string::npos) << e.dump();
  const json bad_schema = {{"type", "integer"}, {"multipleOf", 3}};
  const json format = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", bad_schema}}}};
  e = error_of({{"response_format", format}});
  EXPECT_NE(e["message"].get<std::string>().find("/multipleOf"), std::string::npos) << e.dump();
  e = error_of({{"structured_outputs", {{"regex", "a"}, {"choice", json::array({"b"})}}}});
  EXPECT_EQ(e["param"], "structured_outputs");
  e = error_of({{"structured_outputs", {{"grammar", "root ::= \"\""}}}});
  EXPECT_EQ(e["param"], "structured_outputs.grammar") << e.dump();
  e = error_of({{"structured_outputs", {{"regex", std::string(70000, 'a')}}}});
  EXPECT_NE(e["message"].get<std::string>().find("over the limit"), std::string::npos) << e.dump();
  // The server keeps serving, and /metrics counts the masks and the compile cache.
  const json ok = chat({{"seed", 1}, {"max_tokens", 4}, {"structured_outputs", {{"choice", json::array({"ok"})}}}});
  EXPECT_EQ(ok["choices"][0]["message"]["content"], "ok");
  HttpTestClient c(server_->port());
  c.send(http_request("GET", "/metrics", "", {}));
  const std::string metrics = c.read_reply().body;
  for (const char* name : {"strata_grammar_masks_total ", "strata_grammar_mask_seconds_total ",
                           "strata_grammar_cache_hits_total ", "strata_grammar_cache_misses_total "})
    EXPECT_NE(metrics.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace strata::server
