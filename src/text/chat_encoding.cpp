#include "text/chat_encoding.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "text/tokenizer.h"

namespace strata::text {

namespace {

using ojson = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------------------------
// Python's json.dumps(value, ensure_ascii=False): ", " / ": " separators, keys in order, UTF-8 copied as is.

void append_python_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// float.__repr__: the shortest digits that round-trip, positional when the decimal exponent is in [-4, 16),
// scientific otherwise ("1e-05", "1.5e+16"), and always a ".0" on integral positional values.
void append_python_float(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v < 0 ? "-Infinity" : "Infinity";
    return;
  }
  if (v == 0) {
    out += std::signbit(v) ? "-0.0" : "0.0";
    return;
  }
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));  // "-d.ddde+XX"
  const size_t e = sci.find('e');
  std::string digits;
  bool negative = false;
  for (const char c : sci.substr(0, e)) {
    if (c == '-') negative = true;
    else if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
  if (negative) out += '-';
  const int n = static_cast<int>(digits.size());
  const int point = exponent + 1;  // digits before the decimal point
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out += digits;
    } else if (point >= n) {
      out += digits;
      out.append(static_cast<size_t>(point - n), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(point));
      out += '.';
      out += digits.substr(static_cast<size_t>(point));
    }
    return;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += exponent < 0 ? "e-" : "e+";
  const int magnitude = std::abs(exponent);
  if (magnitude < 10) out += '0';
  out += std::to_string(magnitude);
}

void append_python_json(std::string& out, const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: out += "null"; break;
    case ojson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case ojson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case ojson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case ojson::value_t::number_float: append_python_float(out, v.get<double>()); break;
    case ojson::value_t::string: append_python_string(out, v.get_ref<const std::string&>()); break;
    case ojson::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v) {
        if (!first) out += ", ";
        first = false;
        append_python_json(out, item);
      }
      out += ']';
      break;
    }
    case ojson::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += ", ";
        first = false;
        append_python_string(out, key);
        out += ": ";
        append_python_json(out, item);
      }
      out += '}';
      break;
    }
    default: fail("cannot serialize a JSON value of type ", v.type_name());
  }
}

// Python's truth value of a JSON value (the reference writes `if response_format:`).
bool truthy(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return false;
    case ojson::value_t::boolean: return v.get<bool>();
    case ojson::value_t::number_integer: return v.get<int64_t>() != 0;
    case ojson::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case ojson::value_t::number_float: return v.get<double>() != 0;
    case ojson::value_t::string: return !v.get_ref<const std::string&>().empty();
    default: return !v.empty();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The request, validated and normalized: what tests/reference/chat_reference.py hands the reference encoder.

enum class Role { kSystem, kDeveloper, kUser, kAssistant, kTool };

struct ToolCall {
  std::string id;
  std::string name;
  ojson arguments;  // a JSON object, keys in the order the client wrote them
};

struct Message {
  Role role = Role::kUser;
  std::string content;
  std::string reasoning;             // assistant only
  std::vector<ToolCall> tool_calls;  // assistant only
  std::string tool_call_id;          // tool only
};

struct Request {
  std::vector<Message> messages;
  ChatRequestOptions options;
  ojson tools = ojson::array();  // tools[i].function, as given
  ojson response_format;         // what the prompt shows; null when there is none
  bool has_response_format = false;
};

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

ToolCall parse_tool_call(const ojson& call, const std::string& field) {
  if (!call.is_object()) fail(field, ": expected a tool call object, found ", kind(call));
  ToolCall out;
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

Message parse_message(const ojson& m, const std::string& field) {
  if (!m.is_object()) fail(field, ": expected a message object, found ", kind(m));
  const ojson* role = member(m, "role");
  if (!role) fail(field, ".role: missing");
  const std::string& name = need_string(*role, field + ".role");
  Message out;
  if (name == "system") out.role = Role::kSystem;
  else if (name == "developer") out.role = Role::kDeveloper;
  else if (name == "user") out.role = Role::kUser;
  else if (name == "assistant") out.role = Role::kAssistant;
  else if (name == "tool") out.role = Role::kTool;
  else fail(field, ".role: expected system, developer, user, assistant or tool, found \"", name, "\"");
  out.content = parse_content(m, field + ".content");
  if (out.role == Role::kDeveloper && out.content.empty())
    fail(field, ".content: a developer message needs non-empty content");
  if (out.role == Role::kAssistant) {
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
  if (out.role == Role::kTool) {
    if (const ojson* id = member(m, "tool_call_id")) out.tool_call_id = need_string(*id, field + ".tool_call_id");
  }
  return out;
}

void parse_tools(const ojson& request, Request& out) {
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
void parse_response_format(const ojson& request, Request& out) {
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

void parse_reasoning_options(const ojson& request, ChatRequestOptions& options) {
  if (const ojson* effort = member(request, "reasoning_effort")) {
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

Request parse_request(const ojson& request) {
  if (!request.is_object()) fail("request: expected a JSON object, found ", kind(request));
  Request out;
  const ojson* messages = member(request, "messages");
  if (!messages) fail("messages: missing");
  if (!messages->is_array()) fail("messages: expected an array, found ", kind(*messages));
  if (messages->empty()) fail("messages: empty (a chat needs at least one message)");
  for (size_t i = 0; i < messages->size(); ++i)
    out.messages.push_back(parse_message((*messages)[i], cat("messages[", i, "]")));
  parse_tools(request, out);
  parse_tool_choice(request, out.options);
  parse_response_format(request, out);
  parse_reasoning_options(request, out.options);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// The conversation as the V4 encoder sees it: tool results merged into user turns.

struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_call_id;
};

struct Turn {
  Role role = Role::kUser;
  std::string content;
  std::vector<Block> blocks;  // user turns
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  const ojson* tools = nullptr;            // system turn 0 only: the request's tools
  const ojson* response_format = nullptr;  // likewise
};

// merge_tool_messages: every user message and tool result joins the user turn right before it, if any.
std::vector<Turn> merge_into_turns(const std::vector<Message>& messages) {
  std::vector<Turn> turns;
  for (const Message& m : messages) {
    if (m.role == Role::kUser || m.role == Role::kTool) {
      Block block{m.role == Role::kTool, m.content, m.tool_call_id};
      if (turns.empty() || turns.back().role != Role::kUser) turns.push_back(Turn{Role::kUser, m.content, {}, {}, {}});
      turns.back().blocks.push_back(std::move(block));
    } else {
      turns.push_back(Turn{m.role, m.content, {}, m.reasoning, m.tool_calls});
    }
  }
  return turns;
}

// sort_tool_results_by_call_order: within a user turn, tool results take the order of the calls of the last
// assistant turn that made calls (results of unknown ids count as position 0; the sort is stable).
void sort_tool_results(std::vector<Turn>& turns) {
  std::map<std::string, size_t> call_order;
  for (Turn& turn : turns) {
    if (turn.role == Role::kAssistant && !turn.tool_calls.empty()) {
      call_order.clear();
      for (size_t i = 0; i < turn.tool_calls.size(); ++i)
        if (!turn.tool_calls[i].id.empty()) call_order[turn.tool_calls[i].id] = i;
    } else if (turn.role == Role::kUser && !call_order.empty()) {
      std::vector<Block> results;
      for (const Block& b : turn.blocks)
        if (b.tool_result) results.push_back(b);
      if (results.size() < 2) continue;
      const auto position = [&](const Block& b) {
        const auto it = call_order.find(b.tool_call_id);
        return it == call_order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Block& a, const Block& b) { return position(a) < position(b); });
      size_t next = 0;
      for (Block& b : turn.blocks)
        if (b.tool_result) b = results[next++];
    }
  }
}

long last_user_index(const std::vector<Turn>& turns) {
  for (size_t i = turns.size(); i-- > 0;)
    if (turns[i].role == Role::kUser || turns[i].role == Role::kDeveloper) return static_cast<long>(i);
  return -1;
}

// _drop_thinking_messages: before the last user/developer turn, assistant turns lose their reasoning and
// developer turns disappear.
std::vector<Turn> drop_old_thinking(std::vector<Turn> turns) {
  const long last_user = last_user_index(turns);
  std::vector<Turn> kept;
  for (size_t i = 0; i < turns.size(); ++i) {
    Turn& turn = turns[i];
    const bool before = static_cast<long>(i) < last_user;
    if (before && turn.role == Role::kDeveloper) continue;
    if (before && turn.role == Role::kAssistant) turn.reasoning.clear();
    kept.push_back(std::move(turn));
  }
  return kept;
}

// ---------------------------------------------------------------------------------------------------------------
// Rendering.

// Texts of the reference encoder (encoding_dsv4.py), its {dsml_token}/{thinking_*_token} fields filled in.
constexpr std::string_view kReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// TOOLS_TEMPLATE, before and after {tool_schemas}.
constexpr std::string_view kToolsHead = R"TPL(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)TPL";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

class PromptBuilder {
 public:
  // Conversation text: never a control token, whatever it spells.
  void text(std::string_view s) {
    if (s.empty()) return;
    if (!pieces_.empty() && !pieces_.back().control) pieces_.back().text += s;
    else pieces_.push_back({std::string(s), false});
  }
  void control(std::string_view spelling) { pieces_.push_back({std::string(spelling), true}); }
  // The encoder's own template text: the control spellings in it are control tokens, as in the reference prompt.
  void markup(std::string_view s) {
    size_t start = 0;
    for (size_t i = 0; i < s.size();) {
      const std::string_view* hit = nullptr;
      for (const std::string_view& spelling : v4_control_spellings())
        if (s.substr(i, spelling.size()) == spelling) hit = &spelling;
      if (!hit) {
        ++i;
        continue;
      }
      text(s.substr(start, i - start));
      control(*hit);
      i += hit->size();
      start = i;
    }
    text(s.substr(start));
  }
  std::vector<PromptPiece> take() { return std::move(pieces_); }

 private:
  std::vector<PromptPiece> pieces_;
};

void render_tools(PromptBuilder& out, const ojson& tools) {
  out.markup(kToolsHead);
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) out.text("\n");
    out.text(python_json_dumps(tools[i]));
  }
  out.markup(kToolsTail);
}

// encode_arguments_to_dsml: one parameter line per argument; strings raw with string="true", everything else as
// JSON with string="false".
void render_tool_call(PromptBuilder& out, const ToolCall& call) {
  out.markup("<｜DSML｜invoke name=\"");
  out.text(call.name);
  out.markup("\">\n");
  bool first = true;
  for (const auto& [key, value] : call.arguments.items()) {
    if (!first) out.text("\n");
    first = false;
    out.markup("<｜DSML｜parameter name=\"");
    out.text(key);
    out.markup(value.is_string() ? "\" string=\"true\">" : "\" string=\"false\">");
    out.text(value.is_string() ? value.get_ref<const std::string&>() : python_json_dumps(value));
    out.markup("</｜DSML｜parameter>");
  }
  out.markup("\n</｜DSML｜invoke>");
}

struct RenderContext {
  const std::vector<Turn>& turns;
  bool thinking;
  bool drop_thinking;
  ReasoningEffort effort;
};

// render_message: one turn, then — when the next turn is the assistant's or this is the last turn — the
// assistant prefix after a user/developer turn.
void render_turn(PromptBuilder& out, const RenderContext& ctx, size_t index) {
  const Turn& turn = ctx.turns[index];
  const long last_user = last_user_index(ctx.turns);
  if (index == 0 && ctx.thinking && ctx.effort == ReasoningEffort::kMax) out.text(kReasoningEffortMax);
  switch (turn.role) {
    case Role::kSystem:
      out.text(turn.content);
      if (turn.tools && !turn.tools->empty()) {
        out.text("\n\n");
        render_tools(out, *turn.tools);
      }
      if (turn.response_format && truthy(*turn.response_format)) {
        out.text("\n\n");
        out.text(kResponseFormatHead);
        out.text(python_json_dumps(*turn.response_format));
      }
      break;
    case Role::kDeveloper:
      out.control(v4_tokens::kUser);
      out.text(turn.content);
      break;
    case Role::kUser:
      out.control(v4_tokens::kUser);
      for (size_t i = 0; i < turn.blocks.size(); ++i) {
        if (i > 0) out.text("\n\n");
        const Block& block = turn.blocks[i];
        if (block.tool_result) out.text("<tool_result>");
        out.text(block.text);
        if (block.tool_result) out.text("</tool_result>");
      }
      break;
    case Role::kAssistant:
      if (ctx.thinking && (!ctx.drop_thinking || static_cast<long>(index) > last_user)) {
        out.text(turn.reasoning);
        out.control(v4_tokens::kThinkEnd);
      }
      out.text(turn.content);
      if (!turn.tool_calls.empty()) {
        out.text("\n\n");
        out.markup("<｜DSML｜tool_calls>\n");
        for (size_t i = 0; i < turn.tool_calls.size(); ++i) {
          if (i > 0) out.text("\n");
          render_tool_call(out, turn.tool_calls[i]);
        }
        out.markup("\n</｜DSML｜tool_calls>");
      }
      out.control(v4_tokens::kEos);
      break;
    case Role::kTool:
      fail("internal: tool results must be merged into user turns before rendering");
  }
  if (index + 1 < ctx.turns.size() && ctx.turns[index + 1].role != Role::kAssistant) return;
  if (turn.role == Role::kUser || turn.role == Role::kDeveloper) {
    out.control(v4_tokens::kAssistant);
    const bool open_thinking =
        ctx.thinking && (!ctx.drop_thinking || static_cast<long>(index) >= last_user);
    out.control(open_thinking ? v4_tokens::kThinkStart : v4_tokens::kThinkEnd);
  }
}

std::vector<PromptPiece> encode(const Request& request) {
  std::vector<Message> messages = request.messages;
  const bool has_tools = !request.tools.empty();
  // Tools and the response format go into a leading system message, created empty when there is none.
  if ((has_tools || request.has_response_format) && messages.front().role != Role::kSystem)
    messages.insert(messages.begin(), Message{Role::kSystem, "", "", {}, ""});
  std::vector<Turn> turns = merge_into_turns(messages);
  if (has_tools) turns.front().tools = &request.tools;
  if (request.has_response_format) turns.front().response_format = &request.response_format;
  sort_tool_results(turns);
  // With tools in the prompt, every turn keeps its reasoning (the agent loop needs it); otherwise thinking mode
  // drops what came before the last user turn.
  const bool drop_thinking = !has_tools;
  if (request.options.thinking && drop_thinking) turns = drop_old_thinking(std::move(turns));

  PromptBuilder out;
  out.control(v4_tokens::kBos);
  const RenderContext ctx{turns, request.options.thinking, drop_thinking, request.options.reasoning_effort};
  for (size_t i = 0; i < turns.size(); ++i) render_turn(out, ctx, i);
  return out.take();
}

}  // namespace

const std::vector<std::string_view>& v4_control_spellings() {
  static const std::vector<std::string_view> spellings = {
      v4_tokens::kBos,        v4_tokens::kEos,      v4_tokens::kUser, v4_tokens::kAssistant,
      v4_tokens::kThinkStart, v4_tokens::kThinkEnd, v4_tokens::kDsml};
  return spellings;
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  append_python_json(out, value);
  return out;
}

ChatRequestOptions chat_request_options(const nlohmann::ordered_json& request) {
  return parse_request(request).options;
}

std::vector<PromptPiece> encode_chat_v4(const nlohmann::ordered_json& request) {
  return encode(parse_request(request));
}

std::vector<PromptPiece> encode_chat_v4_text(std::string_view request_body) {
  return encode_chat_v4(parse_json(request_body, "request"));
}

std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::vector<PromptPiece>& pieces) {
  std::vector<int32_t> ids;
  for (const PromptPiece& piece : pieces) {
    if (!piece.control) {
      const std::vector<int32_t> text_ids = tokenizer.encode(piece.text, /*parse_special=*/false);
      ids.insert(ids.end(), text_ids.begin(), text_ids.end());
      continue;
    }
    const std::optional<int32_t> id = tokenizer.token_id(piece.text);
    if (!id)
      fail("the tokenizer has no single token for the control spelling \"", piece.text,
           "\" (a DeepSeek-V4 tokenizer.json is needed: it adds <think>, </think> and ｜DSML｜)");
    ids.push_back(*id);
  }
  return ids;
}

std::string render_prompt(const std::vector<PromptPiece>& pieces) {
  std::string out;
  for (const PromptPiece& piece : pieces) out += piece.text;
  return out;
}

}  // namespace strata::text
