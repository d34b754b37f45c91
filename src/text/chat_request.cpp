#include "text/chat_request.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.h"

namespace strata::text {

namespace {

using ojson = nlohmann::ordered_json;

// nlohmann keeps integers beyond 64 bits only as doubles, while Python's json keeps them exact: parse through
// here so such a number is an error rather than a prompt that silently differs from the reference's.
struct IntegerRangeCheck : nlohmann::json_sax<ojson> {
  std::string too_big;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t& lexeme) override {
    if (lexeme.find_first_of(".eE") == std::string::npos) too_big = lexeme;
    return too_big.empty();
  }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
};

ojson parse_json(std::string_view text, const std::string& field) {
  ojson value;
  try {
    value = ojson::parse(text);
  } catch (const ojson::exception& e) {
    fail(field, ": not valid JSON (", e.what(), ")");
  }
  IntegerRangeCheck check;
  ojson::sax_parse(text, &check);
  if (!check.too_big.empty()) fail(field, ": the integer ", check.too_big, " does not fit in 64 bits");
  return value;
}

std::string kind(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    default: return "a number";
  }
}

const ojson* member(const ojson& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

const std::string& need_string(const ojson& v, const std::string& field) {
  if (!v.is_string()) fail(field, ": expected a string, found ", kind(v));
  return v.get_ref<const std::string&>();
}

// Message content: a string, null (""), or an array of text parts joined by "\n\n" (the reference joins the
// text parts of a list-valued tool result that way; we do the same for every role).
std::string parse_content(const ojson& message, const std::string& field) {
  const ojson* content = member(message, "content");
  if (!content) return "";
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array()) fail(field, ": expected a string, an array of text parts or null, found ", kind(*content));
  std::string joined;
  for (size_t j = 0; j < content->size(); ++j) {
    const ojson& part = (*content)[j];
    const std::string part_field = cat(field, "[", j, "]");
    if (!part.is_object()) fail(part_field, ": expected a content part object, found ", kind(part));
    const ojson* type = member(part, "type");
    if (!type) fail(part_field, ".type: missing");
    if (need_string(*type, part_field + ".type") != "text")
      fail(part_field, ".type: '", type->get<std::string>(), "' is not supported (DeepSeek-V4 reads text parts only)");
    const ojson* text = member(part, "text");
    if (!text) fail(part_field, ".text: missing");
    if (j > 0) joined += "\n\n";
    joined += need_string(*text, part_field + ".text");
  }
  return joined;
}

ChatToolCall parse_tool_call(const ojson& call, const std::string& field) {
  if (!call.is_object()) fail(field, ": expected a tool call object, found ", kind(call));
  ChatToolCall out;
  if (const ojson* id = member(call, "id")) out.id = need_string(*id, field + ".id");
  if (const ojson* type = member(call, "type"); type && need_string(*type, field + ".type") != "function")
    fail(field, ".type: expected \"function\", found \"", type->get<std::string>(), "\"");
  const ojson* function = member(call, "function");
  if (!function) fail(field, ".function: missing");
  if (!function->is_object()) fail(field, ".function: expected an object, found ", kind(*function));
  const ojson* name = member(*function, "name");
  if (!name) fail(field, ".function.name: missing");
  out.name = need_string(*name, field + ".function.name");
  if (out.name.empty()) fail(field, ".function.name: empty");
  const std::string args_field = field + ".function.arguments";
  const ojson* arguments = member(*function, "arguments");
  if (!arguments) fail(args_field, ": missing");
  if (arguments->is_object()) {
    out.arguments = *arguments;
  } else if (arguments->is_string()) {
    const std::string& text = arguments->get_ref<const std::string&>();
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
      out.arguments = ojson::object();  // "" means a call without arguments
    } else {
      out.arguments = parse_json(text, args_field);
      if (!out.arguments.is_object())
        fail(args_field, ": expected a JSON object of named arguments, found ", kind(out.arguments));
    }
  } else {
    fail(args_field, ": expected a JSON string, found ", kind(*arguments));
  }
  return out;
}

ChatMessage parse_message(const ojson& m, const std::string& field) {
  if (!m.is_object()) fail(field, ": expected a message object, found ", kind(m));
  const ojson* role = member(m, "role");
  if (!role) fail(field, ".role: missing");
  const std::string& name = need_string(*role, field + ".role");
  ChatMessage out;
  if (name == "system") out.role = ChatRole::kSystem;
  else if (name == "developer") out.role = ChatRole::kDeveloper;
  else if (name == "user") out.role = ChatRole::kUser;
  else if (name == "assistant") out.role = ChatRole::kAssistant;
  else if (name == "tool") out.role = ChatRole::kTool;
  else fail(field, ".role: expected system, developer, user, assistant or tool, found \"", name, "\"");
  out.content = parse_content(m, field + ".content");
  if (out.role == ChatRole::kDeveloper && out.content.empty())
    fail(field, ".content: a developer message needs non-empty content");
  if (out.role == ChatRole::kAssistant) {
    // DeepSeek's API calls it reasoning_content; vLLM's responses call it reasoning.
    for (const char* key : {"reasoning_content", "reasoning"}) {
      if (const ojson* reasoning = member(m, key)) {
        out.reasoning = need_string(*reasoning, cat(field, ".", key));
        break;
      }
    }
    if (const ojson* calls = member(m, "tool_calls")) {
      if (!calls->is_array()) fail(field, ".tool_calls: expected an array, found ", kind(*calls));
      for (size_t k = 0; k < calls->size(); ++k)
        out.tool_calls.push_back(parse_tool_call((*calls)[k], cat(field, ".tool_calls[", k, "]")));
    }
  }
  if (out.role == ChatRole::kTool) {
    if (const ojson* id = member(m, "tool_call_id")) out.tool_call_id = need_string(*id, field + ".tool_call_id");
  }
  return out;
}

void parse_tools(const ojson& request, ChatRequest& out) {
  const ojson* tools = member(request, "tools");
  if (!tools) return;
  if (!tools->is_array()) fail("tools: expected an array, found ", kind(*tools));
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& tool = (*tools)[i];
    const std::string field = cat("tools[", i, "]");
    if (!tool.is_object()) fail(field, ": expected a tool object, found ", kind(tool));
    const ojson* type = member(tool, "type");
    if (!type) fail(field, ".type: missing");
    if (need_string(*type, field + ".type") != "function")
      fail(field, ".type: expected \"function\", found \"", type->get<std::string>(), "\"");
    const ojson* function = member(tool, "function");
    if (!function) fail(field, ".function: missing");
    if (!function->is_object()) fail(field, ".function: expected an object, found ", kind(*function));
    const ojson* name = member(*function, "name");
    if (!name) fail(field, ".function.name: missing");
    if (need_string(*name, field + ".function.name").empty()) fail(field, ".function.name: empty");
    if (const ojson* parameters = member(*function, "parameters"); parameters && !parameters->is_object())
      fail(field, ".function.parameters: expected a JSON Schema object, found ", kind(*parameters));
    out.tools.push_back(*function);
    out.options.tool_names.push_back(name->get<std::string>());
  }
}

void parse_tool_choice(const ojson& request, ChatRequestOptions& options) {
  const bool has_tools = !options.tool_names.empty();
  options.tool_choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  const ojson* choice = member(request, "tool_choice");
  if (!choice) return;
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s == "none") options.tool_choice = ToolChoice::kNone;
    else if (s == "auto") options.tool_choice = has_tools ? ToolChoice::kAuto : ToolChoice::kNone;
    else if (s == "required") options.tool_choice = ToolChoice::kRequired;
    else fail("tool_choice: expected \"none\", \"auto\", \"required\" or a function object, found \"", s, "\"");
  } else if (choice->is_object()) {
    const ojson* function = member(*choice, "function");
    if (!function || !function->is_object()) fail("tool_choice.function: expected an object with a name");
    const ojson* name = member(*function, "name");
    if (!name) fail("tool_choice.function.name: missing");
    options.tool_choice = ToolChoice::kFunction;
    options.tool_choice_function = need_string(*name, "tool_choice.function.name");
    if (std::find(options.tool_names.begin(), options.tool_names.end(), options.tool_choice_function) ==
        options.tool_names.end())
      fail("tool_choice.function.name: \"", options.tool_choice_function, "\" is not one of the request's tools");
  } else {
    fail("tool_choice: expected a string or an object, found ", kind(*choice));
  }
  if (options.tool_choice == ToolChoice::kRequired && !has_tools)
    fail("tool_choice: \"required\" needs at least one entry in tools");
}

// response_format → the schema the prompt shows: json_schema → json_schema.schema; json_object → {"type":
// "object"}; text → nothing.
void parse_response_format(const ojson& request, ChatRequest& out) {
  const ojson* format = member(request, "response_format");
  if (!format) return;
  if (!format->is_object()) fail("response_format: expected an object, found ", kind(*format));
  const ojson* type = member(*format, "type");
  if (!type) fail("response_format.type: missing");
  const std::string& name = need_string(*type, "response_format.type");
  if (name == "text") return;
  if (name == "json_object") {
    out.response_format = ojson{{"type", "object"}};
  } else if (name == "json_schema") {
    const ojson* json_schema = member(*format, "json_schema");
    if (!json_schema) fail("response_format.json_schema: missing");
    if (!json_schema->is_object()) fail("response_format.json_schema: expected an object, found ", kind(*json_schema));
    const ojson* schema = member(*json_schema, "schema");
    if (!schema) fail("response_format.json_schema.schema: missing");
    if (!schema->is_object()) fail("response_format.json_schema.schema: expected an object, found ", kind(*schema));
    out.response_format = *schema;
  } else {
    fail("response_format.type: expected \"text\", \"json_object\" or \"json_schema\", found \"", name, "\"");
  }
  out.has_response_format = true;
  out.options.json_response = true;
}

// V4.1 (encoding_dsv41's render_reasoning_effort): "low", "high", "xhigh", "max" or an integer budget 1–100;
// absent or null is "high". Anything else — OpenAI's "medium", "minimal" and "none" among it — is refused as the
// reference refuses it, since no budget says what they would mean.
void parse_reasoning_budget(const ojson& request, ChatRequestOptions& options) {
  const ojson* effort = member(request, "reasoning_effort");
  if (!effort || effort->is_null()) return;
  if (effort->is_number_integer()) {
    const bool fits = effort->is_number_unsigned()
                          ? effort->get<uint64_t>() >= 1 && effort->get<uint64_t>() <= 100
                          : effort->get<int64_t>() >= 1 && effort->get<int64_t>() <= 100;
    if (!fits) fail("reasoning_effort: expected an integer from 1 to 100, found ", effort->dump());
    options.reasoning_budget = static_cast<int>(effort->get<int64_t>());
    return;
  }
  if (!effort->is_string())
    fail("reasoning_effort: expected \"low\", \"high\", \"xhigh\", \"max\" or an integer from 1 to 100, found ",
         kind(*effort));
  const std::string& s = effort->get_ref<const std::string&>();
  if (s == "low") options.reasoning_budget = 25;
  else if (s == "high") options.reasoning_budget = 50;
  else if (s == "xhigh") options.reasoning_budget = 75;
  else if (s == "max") options.reasoning_budget = 100;
  else
    fail("reasoning_effort: DeepSeek-V4.1 takes \"low\", \"high\", \"xhigh\", \"max\" or an integer from 1 to 100, "
         "found \"", s, "\"");
}

void parse_reasoning_options(const ojson& request, ChatRequestOptions& options, ChatEncoding encoding) {
  if (encoding == ChatEncoding::kV41) {
    parse_reasoning_budget(request, options);
  } else if (const ojson* effort = member(request, "reasoning_effort")) {
    const std::string& s = need_string(*effort, "reasoning_effort");
    if (s == "max" || s == "xhigh") options.reasoning_effort = ReasoningEffort::kMax;
    else if (s == "high" || s == "medium" || s == "low") options.reasoning_effort = ReasoningEffort::kHigh;
    else if (s == "none" || s == "minimal") options.reasoning_effort = ReasoningEffort::kDefault;
    else fail("reasoning_effort: expected none, minimal, low, medium, high, xhigh or max, found \"", s, "\"");
  }
  const ojson* kwargs = member(request, "chat_template_kwargs");
  if (!kwargs) return;
  if (!kwargs->is_object()) fail("chat_template_kwargs: expected an object, found ", kind(*kwargs));
  for (const char* key : {"thinking", "enable_thinking"}) {
    if (const ojson* flag = member(*kwargs, key)) {
      if (!flag->is_boolean()) fail("chat_template_kwargs.", key, ": expected true or false, found ", kind(*flag));
      options.thinking = options.thinking || flag->get<bool>();
    }
  }
}

}  // namespace

ChatRequest read_chat_request(const nlohmann::ordered_json& request, ChatEncoding encoding) {
  if (!request.is_object()) fail("request: expected a JSON object, found ", kind(request));
  ChatRequest out;
  const ojson* messages = member(request, "messages");
  if (!messages) fail("messages: missing");
  if (!messages->is_array()) fail("messages: expected an array, found ", kind(*messages));
  if (messages->empty()) fail("messages: empty (a chat needs at least one message)");
  for (size_t i = 0; i < messages->size(); ++i)
    out.messages.push_back(parse_message((*messages)[i], cat("messages[", i, "]")));
  parse_tools(request, out);
  parse_tool_choice(request, out.options);
  parse_response_format(request, out);
  parse_reasoning_options(request, out.options, encoding);
  return out;
}

ChatRequestOptions chat_request_options(const nlohmann::ordered_json& request, ChatEncoding encoding) {
  return read_chat_request(request, encoding).options;
}

nlohmann::ordered_json parse_chat_request_body(std::string_view body) { return parse_json(body, "request"); }

}  // namespace strata::text
