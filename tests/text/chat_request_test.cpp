// Reading an OpenAI chat request (text/chat_request.h): the options it implies and the errors that name the field.
#include "text/chat_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "text/chat_encoding.h"

namespace strata::text {
namespace {

using ojson = nlohmann::ordered_json;

TEST(ChatRequest, Options) {
  const auto options = chat_request_options(ojson::parse(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "b"}}],
      "tool_choice": {"type": "function", "function": {"name": "b"}}, "reasoning_effort": "xhigh",
      "response_format": {"type": "json_object"}, "chat_template_kwargs": {"enable_thinking": true}})"));
  EXPECT_TRUE(options.thinking);
  EXPECT_EQ(options.reasoning_effort, ReasoningEffort::kMax);
  EXPECT_EQ(options.tool_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(options.tool_choice, ToolChoice::kFunction);
  EXPECT_EQ(options.tool_choice_function, "b");
  EXPECT_TRUE(options.json_response);
  const auto plain = chat_request_options(ojson::parse(R"({"messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_FALSE(plain.thinking);
  EXPECT_EQ(plain.tool_choice, ToolChoice::kNone);
  EXPECT_EQ(plain.reasoning_effort, ReasoningEffort::kDefault);
}

TEST(ChatRequest, MessagesAreNormalized) {
  const ChatRequest request = read_chat_request(ojson::parse(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "reasoning": "r",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": 2}"}},
                      {"function": {"name": "g", "arguments": " "}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array"}}}})"));
  ASSERT_EQ(request.messages.size(), 3u);
  EXPECT_EQ(request.messages[0].role, ChatRole::kUser);
  EXPECT_EQ(request.messages[0].content, "a\n\nb");
  const ChatMessage& assistant = request.messages[1];
  EXPECT_EQ(assistant.role, ChatRole::kAssistant);
  EXPECT_EQ(assistant.content, "");
  EXPECT_EQ(assistant.reasoning, "r");
  ASSERT_EQ(assistant.tool_calls.size(), 2u);
  EXPECT_EQ(assistant.tool_calls[0].id, "c1");
  EXPECT_EQ(assistant.tool_calls[0].arguments.dump(), R"({"z":1,"a":2})");  // the client's key order
  EXPECT_EQ(assistant.tool_calls[1].arguments, ojson::object());          // blank arguments: no arguments
  EXPECT_EQ(request.messages[2].role, ChatRole::kTool);
  EXPECT_EQ(request.messages[2].tool_call_id, "c1");
  EXPECT_TRUE(request.tools.empty());
  EXPECT_TRUE(request.has_response_format);
  EXPECT_EQ(request.response_format.dump(), R"({"type":"array"})");
  EXPECT_TRUE(request.options.json_response);
}

// ---------------------------------------------------------------------------------------------------------------
// Bad requests name the field.

// The reader names the field, and the encoder passes its error on unchanged.
void expect_error(const std::string& request, const std::string& message) {
  try {
    read_chat_request(parse_chat_request_body(request));
    ADD_FAILURE() << "no error for " << request;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "error: " << e.what();
  }
  try {
    encode_chat_v4_text(request);
    ADD_FAILURE() << "no error from the encoder for " << request;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "encoder's error: " << e.what();
  }
}

TEST(ChatRequest, ErrorsNameTheField) {
  expect_error("{", "request: not valid JSON");
  expect_error("[]", "request: expected a JSON object");
  expect_error("{}", "messages: missing");
  expect_error(R"({"messages": []})", "messages: empty");
  expect_error(R"({"messages": {}})", "messages: expected an array, found an object");
  expect_error(R"({"messages": [1]})", "messages[0]: expected a message object, found a number");
  expect_error(R"({"messages": [{"content": "x"}]})", "messages[0].role: missing");
  expect_error(R"({"messages": [{"role": "function", "content": "x"}]})", "messages[0].role: expected system");
  expect_error(R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content: expected a string");
  expect_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
               "messages[0].content[0].type: 'image_url' is not supported");
  expect_error(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text: missing");
  expect_error(R"({"messages": [{"role": "developer", "content": ""}]})",
               "messages[0].content: a developer message needs non-empty content");
  const std::string user = R"({"role": "user", "content": "u"}, )";
  expect_error(R"({"messages": [)" + user + user +
                   R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]})",
               "messages[2].tool_calls[0].function.arguments: not valid JSON");
  expect_error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]})",
               "messages[0].tool_calls[0].function.arguments: expected a JSON object of named arguments, found an array");
  expect_error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]})",
               "messages[0].tool_calls[0].function.arguments: expected a JSON string, found a number");
  expect_error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})",
               "messages[0].tool_calls[0].function.name: missing");
  expect_error(R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "code", "function": {"name": "f", "arguments": "{}"}}]}]})",
               "messages[0].tool_calls[0].type: expected \"function\"");
  expect_error(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{\"n\": 100000000000000000000}"}}]}]})",
               "messages[0].tool_calls[0].function.arguments: the integer 100000000000000000000 does not fit in 64 bits");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"maximum": -99999999999999999999}}}]})",
               "request: the integer -99999999999999999999 does not fit in 64 bits");
  expect_error(R"({"messages": [{"role": "assistant", "tool_calls": {}}]})", "messages[0].tool_calls: expected an array");
  expect_error(R"({"messages": [{"role": "assistant", "reasoning_content": 1}]})",
               "messages[0].reasoning_content: expected a string");
  expect_error(R"({"messages": [{"role": "tool", "tool_call_id": 7, "content": "r"}]})",
               "messages[0].tool_call_id: expected a string");
  const std::string ok = R"({"messages": [{"role": "user", "content": "u"}], )";
  expect_error(ok + R"("tools": {}})", "tools: expected an array");
  expect_error(ok + R"("tools": [{"type": "function"}]})", "tools[0].function: missing");
  expect_error(ok + R"("tools": [{"type": "retrieval", "function": {"name": "f"}}]})", "tools[0].type: expected \"function\"");
  expect_error(ok + R"("tools": [{"type": "function", "function": {"description": "d"}}]})", "tools[0].function.name: missing");
  expect_error(ok + R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})",
               "tools[0].function.parameters: expected a JSON Schema object");
  expect_error(ok + R"("tool_choice": "sometimes"})", "tool_choice: expected \"none\", \"auto\", \"required\"");
  expect_error(ok + R"("tool_choice": "required"})", "tool_choice: \"required\" needs at least one entry in tools");
  expect_error(ok + R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})",
               "tool_choice.function.name: \"g\" is not one of the request's tools");
  expect_error(ok + R"("response_format": {"type": "yaml"}})", "response_format.type: expected \"text\"");
  expect_error(ok + R"("response_format": {"type": "json_schema"}})", "response_format.json_schema: missing");
  expect_error(ok + R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
               "response_format.json_schema.schema: missing");
  expect_error(ok + R"("reasoning_effort": "extreme"})", "reasoning_effort: expected none, minimal, low, medium, high, xhigh or max");
  expect_error(ok + R"("reasoning_effort": 3})", "reasoning_effort: expected a string");
  expect_error(ok + R"("chat_template_kwargs": {"thinking": "yes"}})", "chat_template_kwargs.thinking: expected true or false");
  expect_error(ok + R"("chat_template_kwargs": []})", "chat_template_kwargs: expected an object");
}

}  // namespace
}  // namespace strata::text
