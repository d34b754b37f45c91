#pragma once
// Reading an OpenAI chat-completions request body: messages, tools, tool_choice, response_format,
// reasoning_effort and chat_template_kwargs, each checked, into plain structs. Bad requests throw strata::Error
// naming the field and saying what was expected and found (e.g. "messages[2].tool_calls[0].function.arguments:
// not valid JSON ...").
//
// What is read here is what tests/reference/chat_reference.py hands deepseek-ai's reference encoder; the V4
// chat encoding (text/chat_encoding.h) renders a ChatRequest into the prompt, and the output side (parser,
// grammar) reads ChatRequestOptions.
//
// Everything takes ordered_json because tool schemas, response_format schemas and tool-call arguments reach the
// prompt serialized in the order the client wrote their keys; a nlohmann::json converts implicitly but has its
// keys sorted.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::text {

// The prompt format a request is rendered in (text/chat_encoding.h): DeepSeek-V4's `encoding_dsv4` or
// DeepSeek-V4.1's `encoding_dsv41`. The two read `reasoning_effort` differently, so reading a request takes it.
enum class ChatEncoding { kV4, kV41 };

// `reasoning_effort` as the V4 encoder knows it: only kMax changes the prompt (a preamble in thinking mode).
enum class ReasoningEffort { kDefault, kHigh, kMax };
enum class ToolChoice { kAuto, kNone, kRequired, kFunction };

// What a request asks of the encoding and of the output side (parser, grammar), parsed and validated.
struct ChatRequestOptions {
  bool thinking = false;  // chat_template_kwargs.thinking (or .enable_thinking): "<think>" vs "</think>"
  ReasoningEffort reasoning_effort = ReasoningEffort::kDefault;
  // V4.1's numeric budget, 1–100 ("Reasoning Effort: N" in thinking mode): low 25, high 50 (the default), xhigh 75,
  // max 100, or the integer given. Read only for ChatEncoding::kV41.
  int reasoning_budget = 50;
  std::vector<std::string> tool_names;          // tools[i].function.name, in order
  ToolChoice tool_choice = ToolChoice::kAuto;   // kNone when there are no tools and tool_choice is absent
  std::string tool_choice_function;             // the forced function's name for kFunction
  bool json_response = false;                   // response_format json_object / json_schema
};

enum class ChatRole { kSystem, kDeveloper, kUser, kAssistant, kTool };

struct ChatToolCall {
  std::string id;
  std::string name;
  nlohmann::ordered_json arguments;  // a JSON object, keys in the order the client wrote them
};

struct ChatMessage {
  ChatRole role = ChatRole::kUser;
  std::string content;                   // text parts of an array content joined by "\n\n"; null is ""
  std::string reasoning;                 // assistant only: reasoning_content (or reasoning)
  std::vector<ChatToolCall> tool_calls;  // assistant only
  std::string tool_call_id;              // tool only
};

// The request, validated and normalized.
struct ChatRequest {
  std::vector<ChatMessage> messages;  // never empty
  ChatRequestOptions options;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // tools[i].function, as given
  nlohmann::ordered_json response_format;  // the schema the prompt shows; null when there is none
  bool has_response_format = false;
};

// Validates the request body and returns it normalized, reading reasoning_effort as `encoding` does.
ChatRequest read_chat_request(const nlohmann::ordered_json& request, ChatEncoding encoding = ChatEncoding::kV4);

// Validates the request and returns its options (read_chat_request(request, encoding).options).
ChatRequestOptions chat_request_options(const nlohmann::ordered_json& request,
                                        ChatEncoding encoding = ChatEncoding::kV4);

// The request body's text as JSON. Malformed JSON is a strata::Error ("request: not valid JSON (...)"), and so is
// an integer beyond 64 bits: nlohmann would keep it only as a rounded double where Python's json keeps it exact,
// and the prompt would silently differ from the reference's.
nlohmann::ordered_json parse_chat_request_body(std::string_view body);

}  // namespace strata::text
